// Package schema compiles, validates and exemplifies the JSON Schemas that workflow scripts
// pass to agent{schema=...} (SPEC §2.2). It is a thin layer over
// github.com/santhosh-tekuri/jsonschema/v6 that fixes luft's rules in one place:
//
//   - A schema without "$schema" is draft 2020-12; "$schema" may name draft 7 (or 2019-09,
//     6, 4, which the library also knows).
//   - A schema is self-contained. "$ref" resolves only inside the schema itself
//     ("#/$defs/x", "#/definitions/x", anchors); a reference to a file or a URL is refused
//     at compile time, so validating model output never touches the disk or the network.
//   - "format" is asserted in every draft for the formats the library knows (date-time,
//     email, uri, uuid, ...), because a script that asks for an email wants an email.
//   - Validation errors are flat, sorted, one line per problem ("$.items[2].score: must be
//     <= 10 (got 11)"), so they can be shown to a user and fed back to a model verbatim.
//
// Example builds a deterministic instance that is valid against a schema; the mock backend
// uses it to answer structured calls offline. The same schema and seed always give the same
// value, and every value it returns has been validated against the compiled schema.
//
// The generator is one file, example.go, longer than the house's ~800 lines on purpose:
// it is one recursive descent (value → alternatives → object, array, string or number →
// value again) over one generator (its seed, its budget of validations and the items a
// unique array must avoid), and its steps call each other in both directions; split by
// JSON type, a reader would follow one descent across files. Only the search for strings
// that match a "pattern", a self-contained walk of the regular expression's syntax tree,
// is apart, in regexgen.go.
//
// A compiled *Schema is immutable and safe for concurrent use.
package schema
