package suggest

import "strings"

// Nearest returns the name of known closest to name, or "" when none is close enough to
// be a typo of it. Close means within two edits (an insertion, deletion, substitution, or
// a swap of two neighbouring letters), and within one for names of up to four letters;
// case is ignored. Ties go to the name listed first.
func Nearest(name string, known []string) string {
	name = strings.ToLower(name)
	limit := 2
	if len([]rune(name)) <= 4 {
		limit = 1
	}
	best, bestD := "", limit+1
	for _, k := range known {
		if k == "" {
			continue
		}
		if d := distance(name, strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b: Levenshtein's with a
// swap of two neighbouring letters counted as one edit.
func distance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}
