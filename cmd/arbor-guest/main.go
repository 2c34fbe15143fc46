// Command arbor-guest is the init and agent of an Arbor microVM's guest
// (internal/vm/guest). It is built static (CGO_ENABLED=0) and packed into
// the guest's image as /init.
package main

import "github.com/arbor-dev/arbor/internal/vm/guest"

func main() { guest.Main() }
