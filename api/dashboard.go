package api

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
)

// The dashboard is one page and two files, embedded: no build step, no
// external asset (the machine may be offline). The page is served at GET /
// to a signed-in browser (see home); its files at /ui/, to anyone: they
// hold no data. It uses only the public /v1 API.
//
//go:embed ui
var uiFiles embed.FS

var (
	uiFS          = mustSub(uiFiles, "ui")
	dashboardHTML = mustRead(uiFS, "index.html")
)

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

func mustRead(f fs.FS, name string) []byte {
	b, err := fs.ReadFile(f, name)
	if err != nil {
		panic(err)
	}
	return b
}

// uiAssets are the page's files under /ui/.
var uiAssets = []string{"app.js", "app.css"}

// uiAsset serves the dashboard's script and style. They change with the
// binary, so browsers revalidate them (no-cache) rather than keep a stale
// one across an upgrade.
func uiAsset(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeFileFS(w, r, uiFS, path.Base(r.URL.Path))
}
