package api

import (
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Servers, event streams and supervisors leave no goroutine behind.
func TestMain(m *testing.M) {
	code := m.Run()
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
