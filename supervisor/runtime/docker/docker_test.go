package docker

import "testing"

func TestRewriteLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"ws://localhost:1234/doc":          "ws://host.docker.internal:1234/doc",
		"http://127.0.0.1:4318":            "http://host.docker.internal:4318",
		"http://[::1]:9/v1/traces":         "http://host.docker.internal:9/v1/traces",
		"postgres://u:p@localhost/db?x=1":  "postgres://u:p@host.docker.internal/db?x=1",
		"http://localhost":                 "http://host.docker.internal",
		"http://localhost.example.com:80/": "http://localhost.example.com:80/",
		"https://api.example.com":          "https://api.example.com",
		"not a url":                        "not a url",
		"localhost:4025":                   "localhost:4025",
	} {
		if got := RewriteLoopback(in); got != want {
			t.Errorf("RewriteLoopback(%q) = %q, want %q", in, got, want)
		}
	}
}
