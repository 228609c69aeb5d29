// Command tool is not API.
package main

func main() {}
