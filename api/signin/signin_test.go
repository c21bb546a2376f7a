package signin

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"
)

type memDisk struct{ b []byte }

func (m *memDisk) LoadSignIns() ([]byte, error) {
	if m.b == nil {
		return nil, fs.ErrNotExist
	}
	return m.b, nil
}
func (m *memDisk) SaveSignIns(b []byte) error { m.b = append([]byte(nil), b...); return nil }

// Entries read back are checked: one the store could not have written (a
// forged one that lasts for years, a hash that is not one) is dropped;
// a real one is kept.
func TestForgedEntriesDroppedOnLoad(t *testing.T) {
	disk := &memDisk{}
	const token = "a-token-of-sixteen-bytes-or-more"
	s, err := Open(token, Options{Disk: disk, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := s.NewLink()
	real, secret, err := s.Redeem(l.Code, "browser")
	if err != nil {
		t.Fatal(err)
	}
	var fl file
	if err := json.Unmarshal(disk.b, &fl); err != nil || len(fl.Sessions) != 1 {
		t.Fatalf("file: %s", disk.b)
	}
	now := time.Now()
	good := *fl.Sessions[0]
	forge := func(edit func(e *entry)) *entry {
		e := good
		e.Hash = strings.Repeat("ab", 32)
		e.ID = "0123456789abcdef"
		edit(&e)
		return &e
	}
	fl.Sessions = append(fl.Sessions,
		forge(func(e *entry) { e.ExpiresAt = now.Add(10 * 365 * 24 * time.Hour) }),
		forge(func(e *entry) { e.CreatedAt = now.Add(time.Hour) }),
		forge(func(e *entry) { e.Hash = "not-a-hash" }),
		forge(func(e *entry) { e.ID = strings.Repeat("x", 4000) }),
		forge(func(e *entry) { e.UserAgent = strings.Repeat("u", 10000) }),
	)
	disk.b, _ = json.Marshal(fl)
	again, err := Open(token, Options{Disk: disk, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	list := again.List()
	if len(list) != 1 || list[0].ID != real.ID {
		t.Fatalf("kept: %+v", list)
	}
	if _, ok := again.Check(secret); !ok {
		t.Fatal("the real session was dropped")
	}
}
