module github.com/agent-control-plane/agent-control-plane

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
