package schema

import (
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxPatternRunes bounds one generated string, since nested repetitions multiply.
const maxPatternRunes = 4096

// patternStrings builds strings that match pattern, trying several repetition counts and
// alternation choices so that one of them also meets the length bounds. JSON Schema patterns
// are unanchored, so when the pattern is not anchored the readable text is also offered
// before or after a match. The caller validates every candidate; this is best effort.
func (g *generator) patternStrings(pattern, loc string, minLen, maxLen int, text string) []string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	re = re.Simplify()
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		n := utf8.RuneCountInString(s)
		if seen[s] || n < minLen || (maxLen >= 0 && n > maxLen) {
			return
		}
		seen[s] = true
		out = append(out, s)
	}
	first := true
	for _, reps := range []int{-1, 1, 2, 3, 5, 8, 13, 21, 34, 64} {
		for _, lastAlt := range []bool{false, true} {
			// Starting the seed letters at a point chosen by the location makes array items
			// and sibling properties differ.
			b := &regexBuilder{g: g, reps: reps, lastAlt: lastAlt, pos: int(g.hash(loc) % 1024)}
			b.build(re)
			if b.overflow {
				continue
			}
			s := b.sb.String()
			add(s)
			if first {
				first = false
				// An unanchored pattern accepts readable text around the shortest match,
				// which beats a long run of repeated characters for minLength.
				if n := utf8.RuneCountInString(s); n < minLen {
					pad := fit(text, minLen-n-1, -1)
					add(s + " " + pad)
					add(pad + " " + s)
				}
				add(text + " " + s)
			}
		}
	}
	return out
}

type regexBuilder struct {
	g        *generator
	reps     int  // count for unbounded repetitions; -1 means the minimum
	lastAlt  bool // take the last alternative instead of the first
	pos      int  // position in the seed's letters
	sb       strings.Builder
	n        int
	overflow bool
}

func (b *regexBuilder) emit(r rune) {
	if b.n >= maxPatternRunes {
		b.overflow = true
		return
	}
	b.sb.WriteRune(r)
	b.n++
}

func (b *regexBuilder) build(re *syntax.Regexp) {
	if b.overflow {
		return
	}
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			b.emit(r)
		}
	case syntax.OpCharClass:
		b.emit(b.g.pick(re.Rune, &b.pos))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.emit(b.g.pick([]rune{'a', 'z'}, &b.pos))
	case syntax.OpCapture:
		b.build(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			b.build(s)
		}
	case syntax.OpAlternate:
		if b.lastAlt {
			b.build(re.Sub[len(re.Sub)-1])
		} else {
			b.build(re.Sub[0])
		}
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		n := lo
		if b.reps >= 0 {
			n = max(lo, b.reps)
			if hi >= 0 {
				n = min(n, hi)
			}
		}
		for i := 0; i < n && !b.overflow; i++ {
			b.build(re.Sub[0])
		}
	}
	// Anchors, word boundaries and empty matches produce nothing.
}

// pick chooses a rune from a class given as ranges [lo0, hi0, lo1, hi1, ...]: the next
// letter of the seed when the class has it, so matches vary with the seed, else a plain
// letter or digit, else the class's first rune.
func (g *generator) pick(ranges []rune, pos *int) rune {
	in := func(r rune) bool {
		for i := 0; i+1 < len(ranges); i += 2 {
			if r >= ranges[i] && r <= ranges[i+1] {
				return true
			}
		}
		return false
	}
	var letters []rune
	for _, r := range strings.ToLower(g.phrase) {
		if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			letters = append(letters, r)
		}
	}
	if len(letters) > 0 {
		r := letters[*pos%len(letters)]
		for _, c := range []rune{r, unicode.ToUpper(r)} {
			if in(c) {
				*pos++
				return c
			}
		}
	}
	// Digits come from the seed too, so ids and codes differ between prompts.
	d := '0' + rune((g.seedHash()+uint64(*pos))%10)
	if in(d) {
		*pos++
		return d
	}
	for _, c := range "aexAEX0123456789_- ." {
		if in(c) {
			return c
		}
	}
	if len(ranges) > 0 {
		return ranges[0]
	}
	return 'a'
}
