// Package pgtest gives tests a PostgreSQL database of their own on the server that
// LUFT_TEST_POSTGRES names (a postgres:// URL; .ci/postgres starts a throwaway one and
// prints it). Each call creates a new database, dropped when the test ends, so tests that
// use it run in parallel. With LUFT_TEST_POSTGRES unset the test is skipped: CI always
// sets it.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Env is the variable that names the test server.
const Env = "LUFT_TEST_POSTGRES"

// skipMsg says how to get a server.
const skipMsg = Env + " is unset: no PostgreSQL server to test on (eval \"$(.ci/postgres start)\" starts one)"

// URL creates an empty database on the test server and returns its URL; the database is
// dropped at the test's cleanup. It skips the test when Env is unset.
func URL(t testing.TB) string {
	t.Helper()
	if os.Getenv(Env) == "" {
		t.Skip(skipMsg)
	}
	u, drop, err := Create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Error(err)
		}
	})
	return u
}

// Available reports whether Env names a server; the message says how to start one when
// it does not.
func Available() (bool, string) { return os.Getenv(Env) != "", skipMsg }

// Create creates an empty database on the test server and returns its URL and the
// function that drops it.
func Create() (dbURL string, drop func() error, err error) {
	base := os.Getenv(Env)
	if base == "" {
		return "", nil, fmt.Errorf("%s is unset", Env)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %v", Env, err)
	}
	cc, err := pgx.ParseConfig(base)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %v", Env, err)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "luft_test_" + hex.EncodeToString(b[:])
	admin := stdlib.OpenDB(*cc)
	admin.SetMaxOpenConns(1)
	if err := exec(admin, `CREATE DATABASE `+name+` TEMPLATE template0 ENCODING 'UTF8'`); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("create test database on %s: %v", Env, err)
	}
	drop = func() error {
		defer admin.Close()
		if err := exec(admin, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("drop test database %s: %v", name, err)
		}
		return nil
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

func exec(db *sql.DB, q string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := db.ExecContext(ctx, q)
	return err
}
