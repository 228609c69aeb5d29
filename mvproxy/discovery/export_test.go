package discovery

// MergeOrder and Served open the merge's order and a document's index to the tests.
var MergeOrder = mergeOrder

func Served(d *Document) map[GVR]struct{} { return d.served }
