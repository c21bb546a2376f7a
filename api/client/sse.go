package client

import (
	"bufio"
	"bytes"
	"io"
)

// Event is one Server-Sent Event.
type Event struct {
	ID    string // the last id field, "" if none
	HasID bool
	Type  string // the event field; "message" if none
	Data  []byte // the data fields, joined with "\n"
}

// EventReader reads Server-Sent Events as the HTML standard defines them:
// one field per line, data lines joined with "\n", an event ends at a blank
// line, comment lines (":") and retry fields skipped. It is the one SSE
// parser of this module: the Go client, the bench and the tests use it.
type EventReader struct {
	sc *bufio.Scanner
}

// MaxEventLine bounds one line. The daemon writes no line longer than
// 16 KiB; this leaves room for other servers.
const MaxEventLine = 1 << 20

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxEventLine)
	return &EventReader{sc: sc}
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (or the read error); an event cut off by the end is dropped, as the
// standard says.
func (er *EventReader) Next() (Event, error) {
	var ev Event
	var data []byte
	hasData := false
	for er.sc.Scan() {
		line := er.sc.Bytes()
		if len(line) == 0 {
			if !hasData && ev.Type == "" {
				continue // nothing to dispatch
			}
			if ev.Type == "" {
				ev.Type = "message"
			}
			ev.Data = data
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		case "event":
			ev.Type = string(value)
		case "id":
			ev.ID, ev.HasID = string(value), true
		}
	}
	if err := er.sc.Err(); err != nil {
		return Event{}, err
	}
	return Event{}, io.EOF
}
