package schema

// The schema example generator, kept whole in one file: see the package doc for why.

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Limits of the example search. The generator works candidate by candidate and checks each
// against the compiled schema, so a hard schema costs attempts, never a wrong answer.
const (
	// softDepth is the nesting level from which objects get only their required properties
	// and arrays only their minimum items; it is what ends recursive schemas (trees).
	softDepth = 6
	// hardDepth stops schemas that require infinite nesting.
	hardDepth = 48
	// maxAlternatives caps the anyOf/oneOf/if branch combinations tried for one value.
	maxAlternatives = 16
	// maxChecks caps validations for one Example call.
	maxChecks = 20000
	// maxPhraseRunes bounds the seed text put into generated strings.
	maxPhraseRunes = 40
)

// Example compiles schema and returns Example(seed) of it.
func Example(schema any, seed string) (any, error) {
	s, err := Compile(schema)
	if err != nil {
		return nil, err
	}
	return s.Example(seed)
}

// Example returns a deterministic instance that is valid against the schema: the same schema
// and seed give the same value, and different seeds (say, different prompts) give different
// strings and numbers. It prefers const, then default, then examples, then an enum value
// when they validate, and otherwise synthesizes one from the type and its constraints,
// taking the first anyOf/oneOf branch that works. The value is made of the types
// encoding/json decodes to (map[string]any, []any, string, float64, bool, nil) and is checked
// against the compiled schema before it is returned; an error says where no valid value
// could be found.
func (s *Schema) Example(seed string) (any, error) {
	g := &generator{seed: seed, phrase: phrase(seed)}
	v, err := g.value([]*jsonschema.Schema{s.compiled}, "$", "", 0)
	if err != nil {
		return nil, fmt.Errorf("schema: cannot generate an example: %w", err)
	}
	if err := s.Validate(v); err != nil {
		// Unreachable unless the generator and the validator disagree; keep it loud.
		return nil, fmt.Errorf("schema: cannot generate an example: generated value %w", err)
	}
	return v, nil
}

type generator struct {
	seed   string
	phrase string
	checks int
	// avoid holds earlier items of a uniqueItems array; value skips candidates equal to
	// one of them, but only at avoidLoc, the item being generated.
	avoidLoc string
	avoid    []any
}

var errBudget = errors.New("the schema is too complex to build an example for (gave up after too many attempts)")

// value generates a value valid against every schema in schemas (a conjunction) at loc.
// hint is the property name or item label used to make strings readable.
func (g *generator) value(schemas []*jsonschema.Schema, loc, hint string, depth int) (any, error) {
	if depth > hardDepth {
		return nil, fmt.Errorf("%s: the schema requires values nested more than %d levels deep", loc, hardDepth)
	}
	alts := alternatives(schemas)
	if len(alts) == 0 {
		return nil, fmt.Errorf("%s: the schema allows no value here (a false schema or a contradiction)", loc)
	}
	var last string
	tried := 0
	try := func(v any) (bool, error) {
		tried++
		if g.checks >= maxChecks {
			return false, errBudget
		}
		if loc == g.avoidLoc && containsValue(g.avoid, v) {
			last = loc + ": equal to an earlier item (uniqueItems)"
			return false, nil
		}
		if err := g.check(schemas, v); err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	}

	// Values the schema author wrote down come first: they are what a reader expects.
	for _, v := range g.explicit(alts, loc) {
		if ok, err := try(v); err != nil {
			return nil, err
		} else if ok {
			return v, nil
		}
	}
	for _, c := range alts {
		if c.fixed {
			// const or enum: nothing synthesized can pass.
			continue
		}
		for _, t := range candidateTypes(c.members) {
			cands, err := g.synth(t, c.members, loc, hint, depth)
			if err != nil {
				if errors.Is(err, errBudget) {
					return nil, err
				}
				last = err.Error()
				continue
			}
			for _, v := range cands {
				if ok, err := try(v); err != nil {
					return nil, err
				} else if ok {
					return v, nil
				}
			}
		}
	}
	if tried == 0 && last != "" {
		// Nothing reached the check: the inner error already says where and why.
		return nil, errors.New(last)
	}
	if tried == 0 {
		return nil, fmt.Errorf("%s: the schema allows no value here (nothing to try: an empty enum or contradictory keywords)", loc)
	}
	return nil, fmt.Errorf("%s: no generated value satisfies the schema after %d tries (last problem: %s)", loc, tried, last)
}

func (g *generator) check(schemas []*jsonschema.Schema, v any) error {
	for _, s := range schemas {
		g.checks++
		if err := s.Validate(v); err != nil {
			var verr *jsonschema.ValidationError
			if errors.As(err, &verr) {
				return errors.New(strings.Join(problems(verr, v, instancePath), "; "))
			}
			return err
		}
	}
	return nil
}

// conj is one way to read a conjunction of schemas: $ref and allOf inlined, and one branch
// chosen for every anyOf, oneOf and if/then/else.
type conj struct {
	members []*jsonschema.Schema
	fixed   bool // some member has const or enum
}

// alternatives expands schemas into at most maxAlternatives conjunctions, first branches
// first. A combination containing a false schema is dropped.
func alternatives(schemas []*jsonschema.Schema) []conj {
	var out []conj
	var walk func(members []*jsonschema.Schema, seen map[*jsonschema.Schema]bool, next int)
	walk = func(members []*jsonschema.Schema, seen map[*jsonschema.Schema]bool, next int) {
		if len(out) >= maxAlternatives {
			return
		}
		for i := next; i < 3*len(members); i++ {
			opts := options(members[i/3], i%3)
			if opts == nil {
				continue
			}
			for _, opt := range opts {
				m2 := append([]*jsonschema.Schema(nil), members...)
				s2 := make(map[*jsonschema.Schema]bool, len(seen))
				for k := range seen {
					s2[k] = true
				}
				if addFlat(&m2, s2, opt...) {
					walk(m2, s2, i+1)
				}
			}
			return
		}
		c := conj{members: members}
		for _, m := range members {
			if m.Const != nil || m.Enum != nil {
				c.fixed = true
			}
		}
		out = append(out, c)
	}
	seen := map[*jsonschema.Schema]bool{}
	var members []*jsonschema.Schema
	if addFlat(&members, seen, schemas...) {
		walk(members, seen, 0)
	}
	return out
}

// options lists the branches of a member's choice keyword: kind 0 anyOf, 1 oneOf, 2 if.
// nil means the member has no such keyword.
func options(m *jsonschema.Schema, kind int) [][]*jsonschema.Schema {
	var opts [][]*jsonschema.Schema
	switch kind {
	case 0:
		for _, b := range m.AnyOf {
			opts = append(opts, []*jsonschema.Schema{b})
		}
	case 1:
		for _, b := range m.OneOf {
			opts = append(opts, []*jsonschema.Schema{b})
		}
	case 2:
		if m.If == nil {
			return nil
		}
		// Meeting "if" and "then" is usually easiest; failing "if" is left to the check.
		then := []*jsonschema.Schema{m.If}
		if m.Then != nil {
			then = append(then, m.Then)
		}
		var els []*jsonschema.Schema
		if m.Else != nil {
			els = append(els, m.Else)
		}
		opts = [][]*jsonschema.Schema{then, els}
	}
	return opts
}

// addFlat appends schemas and everything they pull in unconditionally ($ref, allOf) to
// members. It reports false when a false schema makes the conjunction unsatisfiable.
func addFlat(members *[]*jsonschema.Schema, seen map[*jsonschema.Schema]bool, schemas ...*jsonschema.Schema) bool {
	for _, s := range schemas {
		if s == nil || seen[s] {
			continue
		}
		seen[s] = true
		if s.Bool != nil {
			if !*s.Bool {
				return false
			}
			continue
		}
		*members = append(*members, s)
		refs := []*jsonschema.Schema{s.Ref, s.RecursiveRef}
		if s.DynamicRef != nil {
			refs = append(refs, s.DynamicRef.Ref)
		}
		if !addFlat(members, seen, refs...) || !addFlat(members, seen, s.AllOf...) {
			return false
		}
	}
	return true
}

// explicit lists const, default, examples and enum values of every alternative, in that
// order, as fresh copies. The enum value tried first rotates with the seed.
func (g *generator) explicit(alts []conj, loc string) []any {
	var consts, defaults, examples, enums []any
	seen := map[*jsonschema.Schema]bool{}
	for _, c := range alts {
		for _, m := range c.members {
			if seen[m] {
				continue
			}
			seen[m] = true
			if m.Const != nil {
				consts = append(consts, *m.Const)
			}
			if m.Default != nil {
				defaults = append(defaults, *m.Default)
			}
			examples = append(examples, m.Examples...)
			if m.Enum != nil && len(m.Enum.Values) > 0 {
				vals := m.Enum.Values
				start := int(g.hash(loc) % uint64(len(vals)))
				for i := range vals {
					enums = append(enums, vals[(start+i)%len(vals)])
				}
			}
		}
	}
	all := append(append(append(consts, defaults...), examples...), enums...)
	out := make([]any, 0, len(all))
	for _, v := range all {
		if c, err := normalize(v); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// normalize deep-copies v into the types encoding/json decodes to.
func normalize(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// candidateTypes orders the JSON types a conjunction allows, most useful first. Without any
// "type" keyword the keywords present suggest one, and an unconstrained value is a string.
func candidateTypes(members []*jsonschema.Schema) []string {
	typeOrder := []string{"object", "array", "string", "integer", "number", "boolean", "null"}
	declared := false
	allowed := map[string]bool{}
	for _, t := range typeOrder {
		allowed[t] = true
	}
	wantsInteger := false
	for _, m := range members {
		if m.Types == nil {
			continue
		}
		declared = true
		has := map[string]bool{}
		for _, t := range m.Types.ToStrings() {
			has[t] = true
		}
		wantsInteger = wantsInteger || has["integer"]
		for _, t := range typeOrder {
			if !has[t] && !(t == "integer" && has["number"]) {
				allowed[t] = false
			}
		}
	}
	var out []string
	add := func(t string) {
		if allowed[t] && !contains(out, t) {
			out = append(out, t)
		}
	}
	if !declared {
		for _, t := range inferTypes(members) {
			add(t)
		}
		add("string")
	}
	if !wantsInteger {
		// A declared "number" reads better as 0.3 than as 0 or 1; integers stay a fallback.
		add("number")
	}
	for _, t := range typeOrder {
		add(t)
	}
	return out
}

func inferTypes(members []*jsonschema.Schema) []string {
	var out []string
	for _, m := range members {
		switch {
		case m.Properties != nil || m.Required != nil || m.AdditionalProperties != nil ||
			m.PatternProperties != nil || m.MinProperties != nil || m.MaxProperties != nil:
			out = append(out, "object")
		case m.Items != nil || m.Items2020 != nil || m.PrefixItems != nil || m.MinItems != nil ||
			m.MaxItems != nil || m.Contains != nil:
			out = append(out, "array")
		case m.MinLength != nil || m.MaxLength != nil || m.Pattern != nil || m.Format != nil:
			out = append(out, "string")
		case m.Minimum != nil || m.Maximum != nil || m.ExclusiveMinimum != nil ||
			m.ExclusiveMaximum != nil || m.MultipleOf != nil:
			out = append(out, "number")
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// synth returns candidate values of type t for the conjunction, best first.
func (g *generator) synth(t string, members []*jsonschema.Schema, loc, hint string, depth int) ([]any, error) {
	switch t {
	case "object":
		return g.object(members, loc, depth)
	case "array":
		return g.array(members, loc, hint, depth)
	case "string":
		return g.strings(members, loc, hint), nil
	case "integer":
		return g.numbers(members, loc, true), nil
	case "number":
		return g.numbers(members, loc, false), nil
	case "boolean":
		b := g.hash(loc)%2 == 0
		return []any{b, !b}, nil
	case "null":
		return []any{nil}, nil
	}
	return nil, nil
}

// object fills required properties always and, above softDepth, every declared property.
// A second candidate with only the required ones covers maxProperties, propertyNames and
// "not" surprises.
func (g *generator) object(members []*jsonschema.Schema, loc string, depth int) ([]any, error) {
	members = withDependentSchemas(members)
	required := map[string]bool{}
	declared := map[string]bool{}
	minProps, maxProps := -1, -1
	for _, m := range members {
		for _, r := range m.Required {
			required[r] = true
		}
		for name := range m.Properties {
			declared[name] = true
		}
		if m.MinProperties != nil && *m.MinProperties > minProps {
			minProps = *m.MinProperties
		}
		if m.MaxProperties != nil && (maxProps < 0 || *m.MaxProperties < maxProps) {
			maxProps = *m.MaxProperties
		}
	}
	// Dependent requirements can chain; follow them to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, m := range members {
			for name := range required {
				for _, dep := range dependents(m, name) {
					if !required[dep] {
						required[dep] = true
						changed = true
					}
				}
			}
		}
	}
	req := slices.Sorted(maps.Keys(required))
	var optional []string
	if depth < softDepth {
		for _, name := range slices.Sorted(maps.Keys(declared)) {
			if !required[name] {
				optional = append(optional, name)
			}
		}
	}
	if maxProps >= 0 && len(req)+len(optional) > maxProps {
		keep := max(maxProps-len(req), 0)
		optional = optional[:min(keep, len(optional))]
	}

	full := map[string]any{}
	for _, name := range req {
		v, err := g.property(members, name, loc, depth)
		if err != nil {
			return nil, err
		}
		full[name] = v
	}
	minimal := maps.Clone(full)
	for _, name := range optional {
		subs, ok := propertySchemas(members, name)
		if !ok {
			continue
		}
		v, err := g.value(subs, child(loc, name), name, depth+1)
		if err != nil {
			if errors.Is(err, errBudget) {
				return nil, err
			}
			// An optional property that cannot be built is simply left out.
			continue
		}
		full[name] = v
	}
	// minProperties beyond the declared ones needs extra keys that the schema accepts.
	for i := 1; len(full) < minProps && i <= minProps+8; i++ {
		name := fmt.Sprintf("extra_%d", i)
		if _, taken := full[name]; taken {
			continue
		}
		if _, ok := propertySchemas(members, name); !ok {
			break
		}
		v, err := g.property(members, name, loc, depth)
		if err != nil {
			if errors.Is(err, errBudget) {
				return nil, err
			}
			break
		}
		full[name] = v
		if len(minimal) < minProps {
			minimal[name] = v
		}
	}
	if reflect.DeepEqual(full, minimal) {
		return []any{full}, nil
	}
	return []any{full, minimal}, nil
}

func (g *generator) property(members []*jsonschema.Schema, name, loc string, depth int) (any, error) {
	subs, ok := propertySchemas(members, name)
	if !ok {
		return nil, fmt.Errorf("%s: property %q is required but the schema allows no value for it", loc, name)
	}
	return g.value(subs, child(loc, name), name, depth+1)
}

// propertySchemas collects what every member says about property name: properties, else
// matching patternProperties, else additionalProperties. ok is false when a member forbids
// the property outright.
func propertySchemas(members []*jsonschema.Schema, name string) ([]*jsonschema.Schema, bool) {
	var subs []*jsonschema.Schema
	for _, m := range members {
		matched := false
		if s, ok := m.Properties[name]; ok {
			subs = append(subs, s)
			matched = true
		}
		for re, s := range m.PatternProperties {
			if re.MatchString(name) {
				subs = append(subs, s)
				matched = true
			}
		}
		if matched {
			continue
		}
		switch ap := m.AdditionalProperties.(type) {
		case bool:
			if !ap {
				return nil, false
			}
		case *jsonschema.Schema:
			subs = append(subs, ap)
		}
	}
	for _, s := range subs {
		if s.Bool != nil && !*s.Bool {
			return nil, false
		}
	}
	// Map iteration above is unordered; keep the conjunction stable for determinism.
	sort.SliceStable(subs, func(i, j int) bool { return subs[i].Location < subs[j].Location })
	return subs, true
}

// withDependentSchemas adds the dependentSchemas (draft 7: schema dependencies) of every
// property the object may get. Applying one whose property ends up absent only adds
// constraints, which the check tolerates.
func withDependentSchemas(members []*jsonschema.Schema) []*jsonschema.Schema {
	seen := map[*jsonschema.Schema]bool{}
	for _, m := range members {
		seen[m] = true
	}
	out := append([]*jsonschema.Schema(nil), members...)
	for i := 0; i < len(out); i++ {
		names := map[string]bool{}
		for _, m := range out {
			for _, r := range m.Required {
				names[r] = true
			}
			for p := range m.Properties {
				names[p] = true
			}
		}
		m := out[i]
		var deps []string
		for name := range m.DependentSchemas {
			deps = append(deps, name)
		}
		for name, d := range m.Dependencies {
			if _, ok := d.(*jsonschema.Schema); ok {
				deps = append(deps, name)
			}
		}
		sort.Strings(deps)
		for _, name := range deps {
			if !names[name] {
				continue
			}
			ds := m.DependentSchemas[name]
			if ds == nil {
				ds, _ = m.Dependencies[name].(*jsonschema.Schema)
			}
			// A false dependent schema only forbids the property; leave that to the check.
			trial := append([]*jsonschema.Schema(nil), out...)
			if addFlat(&trial, seen, ds) {
				out = trial
			}
		}
	}
	return out
}

func dependents(m *jsonschema.Schema, name string) []string {
	var out []string
	out = append(out, m.DependentRequired[name]...)
	if deps, ok := m.Dependencies[name].([]string); ok {
		out = append(out, deps...)
	}
	return out
}

// array builds max(minItems, 1) items (fewer below softDepth), filling prefixItems, keeping
// items unique when asked, and making the first items satisfy "contains".
func (g *generator) array(members []*jsonschema.Schema, loc, hint string, depth int) ([]any, error) {
	minItems, maxItems, prefix, minContains := 0, -1, 0, 0
	unique := false
	for _, m := range members {
		if m.MinItems != nil && *m.MinItems > minItems {
			minItems = *m.MinItems
		}
		if m.MaxItems != nil && (maxItems < 0 || *m.MaxItems < maxItems) {
			maxItems = *m.MaxItems
		}
		prefix = max(prefix, len(m.PrefixItems))
		if items, ok := m.Items.([]*jsonschema.Schema); ok {
			prefix = max(prefix, len(items))
		}
		if m.Contains != nil {
			n := 1
			if m.MinContains != nil {
				n = *m.MinContains
			}
			minContains = max(minContains, n)
		}
		unique = unique || m.UniqueItems
	}
	want := max(minItems, minContains)
	if depth < softDepth {
		want = max(want, 1, prefix)
	}
	if maxItems >= 0 {
		want = min(want, maxItems)
	}

	var items []any
	for i := 0; i < want; i++ {
		subs, ok := itemSchemas(members, i, i < minContains)
		if !ok {
			break
		}
		label := fmt.Sprintf("item %d", i+1)
		if hint != "" {
			label = fmt.Sprintf("%s %d", hint, i+1)
		}
		v, err := g.item(subs, items, fmt.Sprintf("%s[%d]", loc, i), label, depth, unique)
		if err != nil {
			if errors.Is(err, errBudget) || i < max(minItems, minContains) {
				return nil, err
			}
			break
		}
		items = append(items, v)
	}
	if items == nil {
		items = []any{}
	}
	floor := max(minItems, minContains)
	if len(items) > floor {
		return []any{items, append([]any{}, items[:floor]...)}, nil
	}
	return []any{items}, nil
}

// item generates one array element, re-salting its location when uniqueItems needs a value
// different from the earlier ones.
func (g *generator) item(subs []*jsonschema.Schema, prev []any, loc, label string, depth int, unique bool) (any, error) {
	var firstErr error
	for salt := 0; salt < 6; salt++ {
		l, lab := loc, label
		if salt > 0 {
			l = fmt.Sprintf("%s~%d", loc, salt)
			lab = fmt.Sprintf("%s.%d", label, salt)
		}
		savedLoc, saved := g.avoidLoc, g.avoid
		if unique {
			g.avoidLoc, g.avoid = l, prev
		}
		v, err := g.value(subs, l, lab, depth+1)
		g.avoidLoc, g.avoid = savedLoc, saved
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if errors.Is(err, errBudget) {
				return nil, err
			}
			if salt == 0 {
				return nil, err
			}
			continue
		}
		if !unique || !containsValue(prev, v) {
			return v, nil
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, fmt.Errorf("%s: cannot find an item different from the previous ones (uniqueItems)", loc)
}

// itemSchemas collects what every member says about item i. ok is false when some member
// forbids an item at i.
func itemSchemas(members []*jsonschema.Schema, i int, contains bool) ([]*jsonschema.Schema, bool) {
	var subs []*jsonschema.Schema
	for _, m := range members {
		var s *jsonschema.Schema
		switch {
		case i < len(m.PrefixItems):
			s = m.PrefixItems[i]
		case m.PrefixItems != nil || m.Items2020 != nil:
			s = m.Items2020
		default:
			switch it := m.Items.(type) {
			case *jsonschema.Schema:
				s = it
			case []*jsonschema.Schema:
				if i < len(it) {
					s = it[i]
				} else {
					switch ai := m.AdditionalItems.(type) {
					case bool:
						if !ai {
							return nil, false
						}
					case *jsonschema.Schema:
						s = ai
					}
				}
			}
		}
		if s != nil {
			if s.Bool != nil && !*s.Bool {
				return nil, false
			}
			subs = append(subs, s)
		}
		if contains && m.Contains != nil {
			subs = append(subs, m.Contains)
		}
	}
	return subs, true
}

func containsValue(vals []any, v any) bool {
	for _, x := range vals {
		if reflect.DeepEqual(x, v) {
			return true
		}
	}
	return false
}

// strings offers a formatted value, values built from each pattern, and readable text made
// from the hint and the seed, each fitted to the length bounds.
func (g *generator) strings(members []*jsonschema.Schema, loc, hint string) []any {
	minLen, maxLen := 0, -1
	var patterns []string
	format := ""
	for _, m := range members {
		if m.MinLength != nil && *m.MinLength > minLen {
			minLen = *m.MinLength
		}
		if m.MaxLength != nil && (maxLen < 0 || *m.MaxLength < maxLen) {
			maxLen = *m.MaxLength
		}
		if m.Pattern != nil {
			patterns = append(patterns, m.Pattern.String())
		}
		if m.Format != nil && format == "" {
			format = m.Format.Name
		}
	}
	text := g.phrase
	if hint != "" {
		text = hint + ": " + g.phrase
	}
	var out []any
	if f, ok := g.formatted(format, loc); ok {
		out = append(out, f)
	}
	for _, p := range patterns {
		for _, s := range g.patternStrings(p, loc, minLen, maxLen, text) {
			out = append(out, s)
		}
	}
	out = append(out, fit(text, minLen, maxLen), fit(g.phrase, minLen, maxLen))
	// Other lengths help when a oneOf or "not" rules out the natural one.
	shortest := max(minLen, 1)
	out = append(out, fit(g.phrase, shortest, shortest), fit(text+" "+text, minLen, maxLen))
	return out
}

// fit pads (by repeating) or cuts text to the rune bounds.
func fit(text string, minLen, maxLen int) string {
	if text == "" {
		text = "x"
	}
	s := text
	for utf8.RuneCountInString(s) < minLen {
		s += " " + text
	}
	r := []rune(s)
	if maxLen >= 0 && len(r) > maxLen {
		r = r[:maxLen]
	}
	if len(r) > minLen && minLen >= 0 {
		// A clipped value ending in a space reads as a mistake.
		for len(r) > max(minLen, 1) && unicode.IsSpace(r[len(r)-1]) {
			r = r[:len(r)-1]
		}
	}
	return string(r)
}

// formatted returns a value for the formats the validator checks.
func (g *generator) formatted(format, loc string) (string, bool) {
	h := g.hash(loc)
	slug := g.slug()
	month, day, hour, minute := 1+h%12, 1+(h>>8)%28, (h>>16)%24, (h>>24)%60
	switch format {
	case "date-time":
		return fmt.Sprintf("2024-%02d-%02dT%02d:%02d:00Z", month, day, hour, minute), true
	case "date":
		return fmt.Sprintf("2024-%02d-%02d", month, day), true
	case "time":
		return fmt.Sprintf("%02d:%02d:00Z", hour, minute), true
	case "duration":
		return fmt.Sprintf("P%dD", 1+h%30), true
	case "period":
		return fmt.Sprintf("2024-%02d-%02dT00:00:00Z/P%dD", month, day, 1+h%30), true
	case "email", "idn-email":
		return slug + "@example.com", true
	case "hostname", "idn-hostname":
		return slug + ".example.com", true
	case "uri", "iri":
		return "https://example.com/" + slug, true
	case "uri-reference", "iri-reference":
		return "/" + slug, true
	case "uri-template":
		return "https://example.com/" + slug + "/{id}", true
	case "uuid":
		sum := fnv.New128a()
		sum.Write([]byte(g.seed + "\x00" + loc))
		b := sum.Sum(nil)
		b[6] = b[6]&0x0f | 0x40
		b[8] = b[8]&0x3f | 0x80
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), true
	case "ipv4":
		return fmt.Sprintf("192.0.2.%d", 1+h%254), true
	case "ipv6":
		return fmt.Sprintf("2001:db8::%x", 1+h%0xfffe), true
	case "json-pointer":
		return "/" + slug, true
	case "relative-json-pointer":
		return "0", true
	case "regex":
		return "^" + slug + "$", true
	case "semver":
		return fmt.Sprintf("1.%d.%d", h%10, (h>>8)%10), true
	}
	return "", false
}

// slug is the seed's first word as lowercase ASCII letters and digits.
func (g *generator) slug() string {
	var sb strings.Builder
	for _, r := range strings.ToLower(g.phrase) {
		switch {
		case (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			sb.WriteRune(r)
		case sb.Len() > 0 && unicode.IsSpace(r):
			return sb.String()
		}
		if sb.Len() >= 20 {
			break
		}
	}
	if sb.Len() == 0 {
		return "example"
	}
	return sb.String()
}

// numbers picks a value inside the bounds and on the multipleOf grid, varied by the seed,
// plus the grid's edges as fallbacks.
func (g *generator) numbers(members []*jsonschema.Schema, loc string, integer bool) []any {
	var lo, hi, step *big.Rat
	loExcl, hiExcl := false, false
	tighten := func(r *big.Rat, excl, lower bool) {
		if r == nil {
			return
		}
		if lower {
			if lo == nil || r.Cmp(lo) > 0 || (r.Cmp(lo) == 0 && excl) {
				lo, loExcl = r, excl
			}
			return
		}
		if hi == nil || r.Cmp(hi) < 0 || (r.Cmp(hi) == 0 && excl) {
			hi, hiExcl = r, excl
		}
	}
	for _, m := range members {
		tighten(m.Minimum, false, true)
		tighten(m.ExclusiveMinimum, true, true)
		tighten(m.Maximum, false, false)
		tighten(m.ExclusiveMaximum, true, false)
		if m.MultipleOf != nil && m.MultipleOf.Sign() > 0 {
			step = lcm(step, m.MultipleOf)
		}
	}
	if integer {
		step = lcm(step, big.NewRat(1, 1))
	}
	h := g.hash(loc)
	var out []*big.Rat
	if step != nil {
		// Work in multiples k of step: value = k * step.
		var kmin, kmax *big.Int
		if lo != nil {
			q := new(big.Rat).Quo(lo, step)
			kmin = ceil(q)
			if loExcl && q.IsInt() {
				kmin.Add(kmin, big.NewInt(1))
			}
		}
		if hi != nil {
			q := new(big.Rat).Quo(hi, step)
			kmax = floor(q)
			if hiExcl && q.IsInt() {
				kmax.Sub(kmax, big.NewInt(1))
			}
		}
		var k *big.Int
		switch {
		case kmin != nil && kmax != nil:
			span := new(big.Int).Sub(kmax, kmin)
			span.Add(span, big.NewInt(1))
			if span.Sign() <= 0 {
				return nil
			}
			k = new(big.Int).Add(kmin, new(big.Int).Mod(big.NewInt(int64(h%1_000_003)), span))
		case kmin != nil:
			k = new(big.Int).Add(kmin, big.NewInt(int64(h%10)))
		case kmax != nil:
			k = new(big.Int).Sub(kmax, big.NewInt(int64(h%10)))
		default:
			// A small positive value reads naturally as a count, score or rating.
			k = big.NewInt(int64(1 + h%10))
			if s, _ := step.Float64(); s >= 1 {
				k = big.NewInt(int64(1 + h%3))
			}
		}
		// Neighbours of the pick help with "not" and uniqueness; the check drops misses.
		next := new(big.Int).Add(k, big.NewInt(1))
		prev := new(big.Int).Sub(k, big.NewInt(1))
		for _, kk := range []*big.Int{k, next, prev, kmin, kmax} {
			if kk != nil {
				out = append(out, new(big.Rat).Mul(new(big.Rat).SetInt(kk), step))
			}
		}
	} else {
		one := big.NewRat(1, 1)
		switch {
		case lo != nil && hi != nil:
			// A tenth-step point strictly inside the range, chosen by the seed, then the middle.
			width := new(big.Rat).Sub(hi, lo)
			frac := big.NewRat(int64(1+h%9), 10)
			out = append(out,
				new(big.Rat).Add(lo, new(big.Rat).Mul(width, frac)),
				new(big.Rat).Quo(new(big.Rat).Add(lo, hi), big.NewRat(2, 1)))
		case lo != nil:
			out = append(out, new(big.Rat).Add(lo, one))
		case hi != nil:
			out = append(out, new(big.Rat).Sub(hi, one))
		default:
			out = append(out, big.NewRat(int64(1+h%10), 1), big.NewRat(int64(1+h%10)*2+1, 2))
		}
		if lo != nil && !loExcl {
			out = append(out, lo)
		}
		if hi != nil && !hiExcl {
			out = append(out, hi)
		}
	}
	vals := make([]any, 0, len(out))
	for _, r := range out {
		f, _ := r.Float64()
		if f == 0 {
			f = 0 // no negative zero
		}
		vals = append(vals, f)
	}
	return vals
}

func lcm(a, b *big.Rat) *big.Rat {
	if a == nil {
		return new(big.Rat).Set(b)
	}
	// lcm(p/q, r/s) = lcm(p, r) / gcd(q, s)
	num := new(big.Int).Mul(a.Num(), b.Num())
	num.Div(num, new(big.Int).GCD(nil, nil, a.Num(), b.Num()))
	den := new(big.Int).GCD(nil, nil, a.Denom(), b.Denom())
	return new(big.Rat).SetFrac(num, den)
}

// floor relies on big.Int.Div being Euclidean: with a positive denominator it rounds down.
func floor(r *big.Rat) *big.Int {
	return new(big.Int).Div(r.Num(), r.Denom())
}

func ceil(r *big.Rat) *big.Int {
	q := floor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func (g *generator) seedHash() uint64 { return g.hash("") }

func (g *generator) hash(loc string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(g.seed))
	h.Write([]byte{0})
	h.Write([]byte(loc))
	return h.Sum64()
}

// phrase is the start of the seed with whitespace collapsed, cut at a word boundary.
func phrase(seed string) string {
	words := strings.Fields(seed)
	var sb strings.Builder
	for _, w := range words {
		if utf8.RuneCountInString(sb.String())+utf8.RuneCountInString(w)+1 > maxPhraseRunes {
			if sb.Len() == 0 {
				sb.WriteString(string([]rune(w)[:maxPhraseRunes]))
			}
			break
		}
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(w)
	}
	if sb.Len() == 0 {
		return "example"
	}
	return sb.String()
}

func child(loc, name string) string {
	if isIdent(name) {
		return loc + "." + name
	}
	return fmt.Sprintf("%s[%q]", loc, name)
}
