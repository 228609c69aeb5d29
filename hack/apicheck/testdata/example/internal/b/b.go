// Package b is internal, but a exposes its Counter.
package b

// Counter counts.
type Counter struct{ N int }

// Add adds one.
func (c *Counter) Add() { c.N++ }

// Unexposed is not reachable from a: it is not API.
func Unexposed() {}
