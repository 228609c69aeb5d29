package a

// OnlyOnWindows is API on windows only.
func OnlyOnWindows() {}
