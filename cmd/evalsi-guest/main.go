// Command evalsi-guest is the init of the microVM sandboxes (the
// firecracker and qemu rungs): built static (CGO_ENABLED=0) and put in the
// guest's initramfs as /init by sandbox/vm. See package sandbox/vm/guest.
package main

import (
	"os"

	"evals.si/sandbox/vm/guest"
)

func main() { os.Exit(guest.Main(os.Args)) }
