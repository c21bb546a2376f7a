package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
)

// MaxBodyBytes bounds every request body (the server cuts a longer one).
const MaxBodyBytes = 1 << 20

// DecodeJSON reads exactly one JSON value of a request's body into v,
// refusing unknown fields, and says what is wrong in the API's terms (the
// field and the JSON type it wants, never a Go type).
func DecodeJSON(r *http.Request, v any) error {
	if r.Body == nil || r.Body == http.NoBody {
		return errors.New("request body is required")
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("body larger than %d bytes", MaxBodyBytes)
		}
		if errors.Is(err, io.EOF) {
			return errors.New("request body is required")
		}
		return jsonError(err)
	}
	if dec.More() {
		return errors.New("malformed JSON body: more than one value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("malformed JSON body: trailing data")
	}
	return nil
}

// jsonError says what is wrong with a body in the API's terms: the field
// and the JSON type it wants, never a Go type.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := jsonKind(te.Type)
		// The path may start with embedded Go types
		// (CreateSandboxRequest.labels): JSON names are lower-case.
		field := te.Field
		for field != "" && field[0] >= 'A' && field[0] <= 'Z' {
			_, rest, _ := strings.Cut(field, ".")
			field = rest
		}
		te.Field = field
		if te.Field == "" {
			return fmt.Errorf("the body must be a JSON %s, not %s", want, te.Value)
		}
		return fmt.Errorf("%s must be %s, not %s", te.Field, withArticle(want), te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("malformed JSON body at byte %d", se.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return fmt.Errorf("malformed JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type that decodes into t.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "whole number"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

func withArticle(kind string) string {
	if kind == "array" || kind == "object" {
		return "an " + kind
	}
	return "a " + kind
}
