-- schema-demo.lua — structured output with a JSON Schema.
--
-- With `schema`, the agent is asked for JSON matching it; luft validates the reply (JSON
-- Schema draft 2020-12 or draft 7) and re-prompts with the errors up to three times. On
-- success `output` is the decoded value, ready to use as a Lua table.
--
--   luft run --workflow examples/schema-demo.lua

meta = {
  reasoning = "Triage issues into structured records, then count by severity.",
  phases = { { label = "triage", description = "one structured agent per issue" } },
}

-- Schemas are plain tables (or JSON strings). Lists of names need json.array-free syntax:
-- a Lua list {"a", "b"} is a JSON array.
local triage_schema = {
  type = "object",
  properties = {
    title = { type = "string", minLength = 3 },
    severity = { type = "string", enum = { "low", "medium", "high" } },
    effort_days = { type = "integer", minimum = 1, maximum = 20 },
  },
  required = { "title", "severity", "effort_days" },
  additionalProperties = false,
}

local issues = {
  "Login fails when the password contains a quote",
  "The settings page is slow on large accounts",
}

function main()
  phase("triage")
  local records = parallel(issues, function(issue)
    -- A call whose reply never matches the schema (after three re-prompts) fails: it
    -- returns ok=false and the validation error, and the branch says what went wrong.
    local r = agent{ name = "triage", prompt = "Triage: " .. issue, schema = triage_schema }
    if not r.ok then
      return { title = issue, severity = "unknown", error = r.error }
    end
    return r.output
  end)

  local by_severity = {}
  for _, rec in ipairs(records) do
    by_severity[rec.severity] = (by_severity[rec.severity] or 0) + 1
  end
  report({ records = records, by_severity = by_severity })
end
