package api

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
)

// The dashboard is one page and its script and style, embedded: no build
// step, no external asset (the machine may be offline). The page is served
// at GET / to a signed-in browser (see home); its files at /ui/, to
// anyone: they hold no data. It uses only the public /v1 API.
var (
	//go:embed ui/index.html
	dashboardHTML []byte
	//go:embed ui/app.js ui/app.css
	uiFiles embed.FS
)

// uiAssets names the page's files under /ui/.
func uiAssets() []string {
	entries, _ := fs.ReadDir(uiFiles, "ui")
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

// uiAsset serves the dashboard's script and style. They change with the
// binary, so browsers revalidate them (no-cache) rather than keep a stale
// one across an upgrade.
func uiAsset(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeFileFS(w, r, uiFiles, "ui/"+path.Base(r.URL.Path))
}
