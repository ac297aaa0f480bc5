// Command toybox is the test pods' program, a static Go binary standing in
// for busybox: "echo ARGS..." prints its arguments; "cat FILES..." prints files; "serve WORDS..." prints
// them, then waits for SIGTERM (a long-running container's main process).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: toybox echo|cat|serve [words...]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(os.Args[2:], " "))
	case "cat":
		for _, f := range os.Args[2:] {
			b, err := os.ReadFile(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Stdout.Write(b)
		}
	case "serve":
		fmt.Println(strings.Join(os.Args[2:], " "))
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
	default:
		fmt.Fprintf(os.Stderr, "toybox: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
