package pgdb

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/durachk/durachk/adapters"
)

func TestValidSchema(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"durachk_t1", true},
		{"durachk_run_42_q", true},
		{"durachk_" + strings.Repeat("a", 50), true},
		{"durachk_" + strings.Repeat("a", 51), false},
		{"durachk_", false},
		{"public", false},
		{"durachk_Upper", false},
		{`durachk_a"; drop schema public; --`, false},
	}
	for _, tt := range tests {
		if err := ValidSchema(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidSchema(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestURLPassword(t *testing.T) {
	tests := []struct {
		url, want string
	}{
		{"postgres://u:pw@h:5432/db", "pw"},
		{"postgresql://u:p@ss:w@h/db", "p@ss:w"},
		{"postgres://u@h/db", ""},
		{"postgres://h/db", ""},
		{"host=h user=u password=pw dbname=db", "pw"},
		{"host=h password='pw' dbname=db", "pw"},
	}
	for _, tt := range tests {
		if got := urlPassword(tt.url); got != tt.want {
			t.Errorf("urlPassword(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}

func TestErr(t *testing.T) {
	db := &DB{secret: "hunter22"}
	tests := []struct {
		name  string
		err   error
		write bool
		want  error // the sentinel, or nil for a definite answer
	}{
		{"server error is definite", &pgconn.PgError{Code: "23505"}, true, nil},
		{"serialization failure is definite", &pgconn.PgError{Code: "40001"}, true, nil},
		{"read cut off", io.ErrUnexpectedEOF, false, adapters.ErrUnavailable},
		{"write cut off", io.ErrUnexpectedEOF, true, adapters.ErrAmbiguous},
		{"write timed out", context.DeadlineExceeded, true, adapters.ErrAmbiguous},
		{"shutdown during a write", &pgconn.PgError{Code: "57P01"}, true, adapters.ErrAmbiguous},
		{"connection exception on a read", &pgconn.PgError{Code: "08006"}, false, adapters.ErrUnavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, false, adapters.ErrUnavailable},
		{"out of memory is definite", &pgconn.PgError{Code: "53200"}, true, nil},
		{"conn closed on a write is not trusted as unsent", pgconn.ErrConnClosed, true, adapters.ErrAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := db.Err("op", tt.err, tt.write)
			if !errors.Is(got, tt.err) {
				t.Errorf("%v does not wrap %v", got, tt.err)
			}
			for _, s := range []error{adapters.ErrUnavailable, adapters.ErrAmbiguous} {
				if errors.Is(got, s) != (s == tt.want) {
					t.Errorf("Err = %v; is %v: %v, want sentinel %v", got, s, errors.Is(got, s), tt.want)
				}
			}
		})
	}
	if db.Err("op", nil, true) != nil {
		t.Error("Err(nil) != nil")
	}
}

func TestErrorScrubsSecret(t *testing.T) {
	db := &DB{secret: "hunter22"}
	err := db.Err("connect", errors.New("auth failed for password hunter22"), false)
	if strings.Contains(err.Error(), "hunter22") {
		t.Errorf("error text keeps the password: %v", err)
	}
}
