package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
)

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

func invalidRequest(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) error {
	return api.Errorf(api.CodeNotFound, format, args...)
}

// handle wraps a handler with authentication at the given scope, panic
// recovery, request logging and the mapping of errors to error bodies.
func (s *Server) handle(need scope, fn func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("panic in handler", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p))
				if rec.status == 0 {
					writeError(rec, api.Errorf(api.CodeInternal, "internal error; the server log has the details"))
				}
			}
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
		}()
		err := s.authenticate(r, need)
		if err == nil {
			err = fn(rec, r)
		}
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) {
				s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
				ae = api.Errorf(api.CodeInternal, "internal error; the server log has the details")
			}
			writeError(rec, ae)
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func writeJSON(w http.ResponseWriter, status int, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Rules read ">=" and "<=": an API read by people and scripts, not
	// embedded in HTML, has no use for \u003e.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
	return nil
}

func writeError(w http.ResponseWriter, e *api.Error) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status())
	_, _ = w.Write(append(b, '\n'))
}

// decodeJSON reads exactly one JSON object into dst. Unknown fields, wrong
// types, trailing data and oversized bodies are invalid_request errors that
// name the field and what it accepts.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return invalidRequest("request body is larger than %d bytes", MaxBodyBytes)
		}
		return invalidRequest("reading the request body failed: %v", err)
	}
	return decodeBytes(body, dst)
}

// decodeBytes is decodeJSON on a body already read; fuzzed on its own.
func decodeBytes(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidRequest("request body is empty; expected a JSON object with the fields %s", fieldList(dst))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return describeDecodeError(err, dst)
	}
	if dec.More() {
		return invalidRequest("unexpected data after the JSON object; send exactly one object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidRequest("unexpected data after the JSON object; send exactly one object")
	}
	return nil
}

func describeDecodeError(err error, dst any) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalidRequest("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalidRequest("the request body must be a JSON object with the fields %s, got %s", fieldList(dst), typ.Value)
		}
		return invalidRequest("field %q must be %s, got %s", jsonPath(typ.Field), describeType(typ.Type), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidRequest("malformed JSON: the body ends in the middle of a value")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return invalidRequest("unknown field %s; accepted fields: %s", name, fieldList(dst))
	default:
		return invalidRequest("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

// jsonPath drops the names of embedded Go structs (which start with a capital
// letter; every JSON field here starts lower case) from a field path.
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && !(p[0] >= 'A' && p[0] <= 'Z') {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

func describeType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number that fits in %s", t.Kind())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 timestamp string"
		}
		return "an object"
	case reflect.Map:
		return "an object"
	}
	return t.String()
}

// fieldList names the JSON fields of dst's type, embedded structs included.
func fieldList(dst any) string {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				names = append(names, name)
			}
		}
	}
	if t.Kind() == reflect.Struct {
		walk(t)
	}
	return strings.Join(names, ", ")
}

// queryParams checks that q holds only allowed parameters, each at most once,
// and returns them as a map.
func queryParams(q url.Values, allowed ...string) (map[string]string, error) {
	out := make(map[string]string, len(q))
	for k, vs := range q {
		if !slices.Contains(allowed, k) {
			return nil, invalidRequest("unknown query parameter %q; accepted: %s", clip(k), strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return nil, invalidRequest("query parameter %q is given %d times; give it once", k, len(vs))
		}
		out[k] = vs[0]
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
