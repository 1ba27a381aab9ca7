package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every .lua file of the folder is embedded and described.
func TestListMatchesTheFolder(t *testing.T) {
	var want []string
	for _, pat := range []string{"*.lua", "lib/*.lua"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			want = append(want, strings.TrimSuffix(filepath.ToSlash(p), ".lua"))
		}
	}
	got := List()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("List() = %v, want %v", got, want)
	}
	for _, ex := range got {
		if ex.Description == "" {
			t.Errorf("%s has no description (its first line should be a -- comment)", ex.Name)
		}
		src, ok := Source(ex.Name)
		disk, _ := os.ReadFile(ex.Name + ".lua")
		if !ok || src != string(disk) {
			t.Errorf("Source(%q) differs from the file", ex.Name)
		}
	}
}

func TestSourceRefusesOtherNames(t *testing.T) {
	for _, name := range []string{"", "../go.mod", "/etc/passwd", "nope", "lib", "examples.go", "lib/../hello.lua/.."} {
		if _, ok := Source(name); ok {
			t.Errorf("Source(%q) found something", name)
		}
	}
	if _, ok := Source("hello.lua"); !ok {
		t.Error("Source(hello.lua) not found")
	}
}
