// Command thinmain passes the rule that mains hold only flags.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	name := flag.String("name", "world", "whom to greet")
	flag.Parse()
	fmt.Fprintf(os.Stdout, "hello, %s\n", *name)
}
