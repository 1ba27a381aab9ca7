// Package skills holds luft's embedded workflow-authoring skill: a SKILL.md with front
// matter (name, description) and reference pages on the primitives, patterns, prompt writing
// and worked examples. Coding agents read it before they write luft workflows (`luft
// skill-dump DIR`, `luft install`), and the planner sends it to the model as the system
// prompt of a plan. Every ```lua block in it is a complete workflow that runs on the mock
// backend, and every primitive and option it names exists (skills_test.go holds both).
package skills
