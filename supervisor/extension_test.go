package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agent-control-plane/agent-control-plane/supervisor/field"
)

// A face's extension is kept, persisted and returned as it was given;
// each bound refuses past it with a field error and keeps what was
// there.
func TestExtensionsBounded(t *testing.T) {
	h := newHarness(t, nil)
	big := json.RawMessage(`"` + strings.Repeat("x", MaxExtensionBytes) + `"`)
	if _, err := h.sup.Create(context.Background(), CreateRequest{Name: "big", Extensions: Extensions{"face": big}}); !isField(err, field.Extension) {
		t.Fatalf("create with %d bytes of extension: %v", len(big), err)
	}
	assertNothingLeft(t, h, "big")

	h.create("x", nil, nil)
	sb, err := h.sup.SetExtension("x", "face", json.RawMessage(`{"a":1}`))
	if err != nil || string(sb.Extensions["face"]) != `{"a":1}` {
		t.Fatalf("set: %+v %v", sb.Extensions, err)
	}
	for _, c := range []struct {
		name, key string
		value     json.RawMessage
	}{
		{"too large", "other", big},
		{"not JSON", "other", json.RawMessage(`{`)},
		{"empty key", "", json.RawMessage(`1`)},
		{"long key", strings.Repeat("k", MaxExtensionKeyLen+1), json.RawMessage(`1`)},
	} {
		if _, err := h.sup.SetExtension("x", c.key, c.value); !isField(err, field.Extension) {
			t.Errorf("%s: %v, want a field error for the extension", c.name, err)
		}
	}
	for i := range MaxExtensions - 1 {
		if _, err := h.sup.SetExtension("x", string(rune('a'+i)), json.RawMessage(`1`)); err != nil {
			t.Fatalf("key %d of %d: %v", i+2, MaxExtensions, err)
		}
	}
	if _, err := h.sup.SetExtension("x", "one-too-many", json.RawMessage(`1`)); !isField(err, field.Extension) {
		t.Fatalf("key %d: %v", MaxExtensions+1, err)
	}
	h.close(false)
	h.start()
	sb, err = h.sup.Get("x")
	if err != nil || len(sb.Extensions) != MaxExtensions || string(sb.Extensions["face"]) != `{"a":1}` {
		t.Fatalf("after a restart: %v %v", sb.Extensions, err)
	}
	if sb, err = h.sup.SetExtension("x", "face", nil); err != nil || sb.Extensions["face"] != nil {
		t.Fatalf("remove: %v %v", sb.Extensions, err)
	}
}

// A record written before the core kept its own units reads as it was
// enforced (cpu in CPUs becomes thousandths), and a field it no longer
// knows (a face's, kept in the record before extensions) is kept as the
// record extension, not lost.
func TestLegacyRecordFields(t *testing.T) {
	r, err := DecodeRecord([]byte(`{"version":3,"id":"x","state":"stopped","marker":"m",
		"resources":{"cpu":0.25,"memoryBytes":268435456},"formerField":3600000}`))
	if err != nil {
		t.Fatal(err)
	}
	sb := r.sandbox()
	if sb.Resources.MilliCPU != 250 || sb.Resources.MemoryBytes != 256<<20 {
		t.Errorf("resources %+v, want 250 millicores and 256 MiB", sb.Resources)
	}
	if got := string(sb.Extensions[RecordExtension]); got != `{"formerField":3600000}` {
		t.Errorf("extension %q", got)
	}
	b, _ := json.Marshal(Record{Resources: recordResources{Resources: sb.Resources}, Extensions: sb.Extensions})
	var again map[string]json.RawMessage
	json.Unmarshal(b, &again)
	if _, ok := again["formerField"]; ok || strings.Contains(string(again["resources"]), `"cpu"`) {
		t.Errorf("a record written again keeps the former fields: %s", b)
	}
}

func isField(err error, name string) bool {
	var fe *field.Error
	return errors.As(err, &fe) && fe.Field == name && errors.Is(err, ErrInvalid)
}

// A record is read once when this version knows all of it; one with
// something after its value is refused, as a whole JSON read refuses it.
func TestDecodeRecordStrictAndWhole(t *testing.T) {
	good := `{"version":3,"id":"x","state":"stopped","marker":"m"}`
	if r, err := DecodeRecord([]byte(good)); err != nil || r.ID != "x" || len(r.Extensions) != 0 {
		t.Fatalf("a record of this version: %+v %v", r, err)
	}
	if _, err := DecodeRecord([]byte(good + `{"more":1}`)); err == nil {
		t.Fatal("a record followed by another value was read")
	}
	if _, err := DecodeRecord([]byte(good + "\n")); err != nil {
		t.Fatalf("a record ending in a newline: %v", err)
	}
}
