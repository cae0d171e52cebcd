// Package api holds what the server and its clients agree on over the wire:
// error codes, the error body, and the JSON request and response types.
package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Stable error codes. Clients branch on these, never on messages.
const (
	CodeInvalidRequest     = "invalid_request"
	CodeInvalidBand        = "invalid_band"
	CodeInvalidHook        = "invalid_hook"
	CodeDestinationRefused = "destination_refused"
	CodeUnauthorized       = "unauthorized"
	CodeForbidden          = "forbidden"
	CodeNotFound           = "not_found"
	CodeOutsideBand        = "outside_band"
	CodeConflict           = "conflict"
	CodeQuotaExceeded      = "quota_exceeded"
	CodeInternal           = "internal"
)

// statusOf maps each code to the HTTP status it is always served with.
var statusOf = map[string]int{
	CodeInvalidRequest:     http.StatusBadRequest,
	CodeInvalidBand:        http.StatusBadRequest,
	CodeInvalidHook:        http.StatusBadRequest,
	CodeDestinationRefused: http.StatusBadRequest,
	CodeUnauthorized:       http.StatusUnauthorized,
	CodeForbidden:          http.StatusForbidden,
	CodeNotFound:           http.StatusNotFound,
	CodeOutsideBand:        http.StatusConflict,
	CodeConflict:           http.StatusConflict,
	CodeQuotaExceeded:      http.StatusConflict,
	CodeInternal:           http.StatusInternalServerError,
}

// Error is the body of every error answer: {"code": "...", "message": "..."}.
// Rules in internal/ return it so that the server serves it unchanged and the
// provider shows the very same words at plan time.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Status is the HTTP status that goes with the error's code.
func (e *Error) Status() int {
	if s, ok := statusOf[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// HasCode reports whether err is (or wraps) an *Error with the given code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// KnownCode reports whether code is one of the stable codes above.
func KnownCode(code string) bool {
	_, ok := statusOf[code]
	return ok
}
