package proc

import (
	"testing"

	"go.uber.org/goleak"
)

// The epoll loop ends with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
