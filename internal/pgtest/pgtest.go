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
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Env is the variable that names the test server.
const Env = "LUFT_TEST_POSTGRES"

// URL creates an empty database on the test server and returns its URL; the database is
// dropped at the test's cleanup. It skips the test when Env is unset.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(Env)
	if base == "" {
		t.Skipf("%s is unset: no PostgreSQL server to test on (eval \"$(.ci/postgres start)\" starts one)", Env)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "luft_test_" + hex.EncodeToString(b[:])
	admin := open(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name+` TEMPLATE template0 ENCODING 'UTF8'`); err != nil {
		admin.Close()
		t.Fatalf("create test database on %s: %v", Env, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func open(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(1)
	return db
}
