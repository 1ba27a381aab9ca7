// Package planner turns a task in plain words into a validated luft workflow.
//
// A model planner sends the embedded authoring skill (package skills) as the system prompt
// and the task as the user prompt, takes the fenced ```lua block of the reply and validates
// it: it compiles, defines main, has a valid meta, and a dry run on the mock backend calls
// report() and finishes within caps (agent calls, time, memory). A rejected script goes
// back to the model with the reason (and any lint warnings from the skill's rules) for up
// to MaxAttempts attempts; then Plan fails naming the last reason. Fix does the same for a
// script that failed while running (--auto-fix), giving the model the error and the failing
// line and asking it to keep the calls that already ran unchanged, so they replay.
//
// Without a model (the mock backend) the template planner builds a deterministic script:
// a few parallel analyses of the task and a synthesis, with phases. It never fails and
// needs no network, so `luft run "TASK"` works on a fresh machine.
//
// Agents get the tools their work needs from what the configuration offers (Tools): the
// template planner gives the analyses of a task about the code the read-only file tools
// (and run_command when commands are allowed) and says so in meta.reasoning; the model
// planner's prompt lists the tools offered, and a script that gives an agent a tool not
// offered is rejected with the reason. The dry run records what each agent asked for
// (Check.Uses), so the plan shown says which tools it gave.
//
// The planner knows nothing of the CLI: the model is any Model (runtime.Service.Complete
// sends it through the scheduler as an interactive turn), and the caller journals the
// returned calls with the run.
package planner
