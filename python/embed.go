// Package python carries the Python side of the harness protocol: the
// evalsi_harness shim that hosts a harness written as a Python class
// (harness.external.python). The worker binary embeds the shim and writes it
// out when it starts a Python harness, so an installed evalsi needs no
// checkout of this repository.
package python

import "embed"

// Shim holds the evalsi_harness package and its examples.
//
//go:embed evalsi_harness/*.py evalsi_harness/examples/*.py
var Shim embed.FS
