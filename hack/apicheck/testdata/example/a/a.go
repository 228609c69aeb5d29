// Package a is the public package of the fixture module the apicheck tests change.
package a

import "example.com/m/internal/b"

// Greet greets.
func Greet(name string) string { return "hello " + name }

// NewCounter returns a counter of the internal package.
func NewCounter() *b.Counter { return &b.Counter{} }
