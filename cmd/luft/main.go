package main

import "os"

func main() {
	os.Exit(execute(osEnv(), os.Args[1:]))
}
