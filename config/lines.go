package config

import (
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// keyLines maps each key path written in src (parts joined by "\x00") to the line, from
// 1, where it first appears: table headers and key/value lines. It is a line scanner,
// not a parser: src has already parsed, so it only has to follow table headers and skip
// multi-line strings. Keys inside inline tables are not found; their enclosing key is.
func keyLines(src string) map[string]int {
	out := map[string]int{}
	record := func(path []string, line int) {
		for n := 1; n <= len(path); n++ {
			k := strings.Join(path[:n], "\x00")
			if _, ok := out[k]; !ok {
				out[k] = line
			}
		}
	}
	src = strings.TrimPrefix(src, "\ufeff") // a byte order mark, which TOML allows
	var table []string
	inML := "" // the delimiter of the multi-line string being skipped
	for i, ln := range strings.Split(src, "\n") {
		line := i + 1
		s := strings.TrimSpace(ln)
		if inML != "" {
			if strings.Count(s, inML)%2 == 1 {
				inML = ""
			}
			continue
		}
		switch {
		case s == "" || s[0] == '#':
			continue
		case strings.HasPrefix(s, "[[") || s[0] == '[':
			inner := strings.TrimLeft(s, "[")
			end := indexOutsideQuotes(inner, ']')
			if end < 0 {
				continue
			}
			// A header is alone on its line; anything else is a multi-line array's row.
			if rest := strings.TrimSpace(strings.TrimLeft(inner[end:], "]")); rest == "" || rest[0] == '#' {
				table = splitKey(inner[:end])
				record(table, line)
			}
			continue
		}
		eq := indexOutsideQuotes(s, '=')
		if eq <= 0 {
			continue // inside a multi-line array or inline table
		}
		record(append(append([]string{}, table...), splitKey(s[:eq])...), line)
		val := s[eq+1:]
		for _, d := range []string{`"""`, `'''`} {
			if strings.Count(val, d)%2 == 1 {
				inML = d
				break
			}
		}
	}
	return out
}

// indexOutsideQuotes is the index of the first c in s outside "..." and '...'.
func indexOutsideQuotes(s string, c byte) int {
	var q byte
	for i := 0; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case q != 0:
			if s[i] == q {
				q = 0
			}
		case s[i] == '"' || s[i] == '\'':
			q = s[i]
		case s[i] == c:
			return i
		}
	}
	return -1
}

// splitKey splits a dotted TOML key (bare, "basic" or 'literal' parts) into its parts.
func splitKey(s string) []string {
	var parts []string
	for {
		s = strings.TrimSpace(s)
		dot := indexOutsideQuotes(s, '.')
		part := s
		if dot >= 0 {
			part = s[:dot]
		}
		part = strings.TrimSpace(part)
		switch {
		case len(part) >= 2 && part[0] == '"':
			if u, err := strconv.Unquote(part); err == nil {
				part = u
			} else if u, ok := tomlString(part); ok {
				part = u // an escape Go lacks, such as TOML 1.1's \e
			}
		case len(part) >= 2 && part[0] == '\'':
			part = part[1 : len(part)-1]
		}
		parts = append(parts, part)
		if dot < 0 {
			return parts
		}
		s = s[dot+1:]
	}
}

// tomlString unquotes a TOML basic string with the TOML decoder.
func tomlString(quoted string) (string, bool) {
	var v struct {
		K string `toml:"k"`
	}
	if _, err := toml.Decode("k = "+quoted, &v); err != nil {
		return "", false
	}
	return v.K, true
}
