package main

import "fmt"

// TODO: greet by name
func main() {
	fmt.Println("hello")
}
