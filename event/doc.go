// Package event defines luft's run events (SPEC §5): one ordered stream per run whose
// entries are plain data. Producers fill Type and Data; the runtime stamps Seq, RunID and TS
// when it accepts an event, persists it, and only then fans it out.
package event
