package api

import (
	"bytes"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// The create body decoder and the supervisor's validation never panic,
// and whatever passes both is safe to act on.
func FuzzDecodeCreate(f *testing.F) {
	f.Add([]byte(`{"name":"a","envVars":{"K":"v"},"labels":{"origin":"cli"},"autoStopInterval":5,"autoDeleteInterval":-1}`))
	f.Add([]byte(`{"name":"../x"}`))
	f.Add([]byte(`{"name":"a","autoStopInterval":1e400}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 64<<10 {
			return // the size limit has its own test; big inputs only slow the fuzzer
		}
		r, _ := http.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body))
		r.Body = http.MaxBytesReader(nil, r.Body, MaxBodyBytes)
		req, err := DecodeCreate(r)
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			if !strings.Contains(err.Error(), "invalid request") {
				t.Fatalf("validation error without ErrInvalid: %v", err)
			}
			return
		}
		if !validName.MatchString(req.Name) || strings.Contains(req.Name, "..") && strings.HasPrefix(req.Name, ".") {
			t.Fatalf("accepted name %q", req.Name)
		}
		for k, v := range req.Env {
			if strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("accepted env %q", k)
			}
		}
		if req.AutoStopInterval != nil && *req.AutoStopInterval < 0 {
			t.Fatalf("accepted negative autoStopInterval")
		}
		if len(req.Labels) > supervisor.MaxLabels {
			t.Fatalf("accepted %d labels", len(req.Labels))
		}
	})
}

// Label filters from any query string either fail cleanly or are valid.
func FuzzLabelFilter(f *testing.F) {
	f.Add("label.origin=cli&label.team=a")
	f.Add(`labels={"origin":"cli"}`)
	f.Add("label.=x&label.a=1&label.a=2")
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		filter, err := labelFilter(q)
		if err != nil {
			return
		}
		if err := supervisor.ValidateLabels(filter); err != nil {
			t.Fatalf("labelFilter accepted invalid labels: %v", err)
		}
	})
}

// Last-Event-ID parsing accepts exactly the plain decimal uint64s.
func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"0", "1795947749226758", "18446744073709551615", "18446744073709551616", "-1", " 42 ", "4e3", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r, _ := http.NewRequest("GET", "/v1/events", nil)
		r.Header["Last-Event-Id"] = []string{header}
		got := ParseLastEventID(r)
		want, err := strconv.ParseUint(strings.TrimSpace(header), 10, 64)
		plain := err == nil && !strings.ContainsAny(strings.TrimSpace(header), "+-_")
		switch {
		case got == nil && plain:
			t.Fatalf("%q refused", header)
		case got != nil && (!plain || *got != want):
			t.Fatalf("%q parsed as %d", header, *got)
		}
	})
}
