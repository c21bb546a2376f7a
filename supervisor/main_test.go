package supervisor

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a supervisor or watcher starts ends with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Keep-alive connections of http.DefaultClient used by tests to
		// talk to children.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
