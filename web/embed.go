// Package web holds the browser page that the gateway serves: the bundle
// that web/build writes into web/dist from the TypeScript under web/src
// (xterm.js terminals, the runs list, the run page), embedded into the
// binary at compile time. See docs/WEB.md.
//
// web/dist is tracked only as an empty placeholder, so a fresh clone
// compiles before the npm build has run; Built tells whether the page was
// there when the binary was compiled.
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// FS returns the built page with index.html, app.js and app.css at its
// root, ready for http.FileServerFS. Before web/build has run it holds
// only the placeholder .gitkeep.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// "dist" is a valid path and embedded; Sub cannot fail on it.
		panic("web: " + err.Error())
	}
	return sub
}

// Built reports whether web/build had written the page (index.html) when
// this binary was compiled.
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}
