-- hello.lua — the smallest useful workflow.
--
-- A workflow script holds only control flow; agents do the work. luft runs the top-level
-- code first (define `meta` and functions there), then calls main().
--
--   luft run --workflow examples/hello.lua
--   luft run --workflow examples/hello.lua --args '{"name": "Ada"}'

-- meta is optional: it tells people (and the progress view) what the run will do.
meta = {
  reasoning = "One agent writes a greeting; the script reports it.",
  phases = { { label = "greet", description = "ask one agent for a greeting" } },
}

function main()
  phase("greet")

  -- `args` holds the --args JSON; it is an empty table when none was given.
  local who = args.name or "world"

  -- agent{} runs one sub-agent to completion and returns a result table:
  -- ok, status, output, text, error, tokens, usage, cost, attempts, backend, model, ...
  -- A call that fails (after its retries) does not stop the run: it comes back with
  -- ok=false, status "error" or "timed_out", and error set. Check r.ok and decide.
  local r = agent{
    name = "greeter",
    prompt = "Write a one-line greeting for " .. who .. ".",
  }
  if not r.ok then
    error("the greeter failed: " .. r.error) -- ends the run (exit 1) with this message
  end

  log("the greeter used " .. r.tokens .. " tokens")

  -- report() sets the run's result; call it once. A table is printed as JSON.
  report({ greeting = r.output, tokens = r.tokens })
end
