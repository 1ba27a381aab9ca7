-- code-review.lua — review a change from several angles, keep only confirmed findings.
--
--   luft run --workflow workflows/code-review.lua --args '{"change": "diff or description"}'
--
-- args: change (string: the diff or a description of it), angles (optional list).

meta = {
  reasoning = "Independent reviewers per angle, each finding confirmed by a second agent, then a summary.",
  phases = {
    { label = "review", description = "one reviewer per angle" },
    { label = "confirm", description = "each finding checked by a second agent" },
    { label = "summary", description = "a short verdict" },
  },
}

local finding_schema = {
  type = "object",
  properties = {
    findings = {
      type = "array",
      items = {
        type = "object",
        properties = {
          title = { type = "string" },
          severity = { type = "string", enum = { "low", "medium", "high" } },
        },
        required = { "title", "severity" },
      },
      maxItems = 3,
    },
  },
  required = { "findings" },
}

function main()
  local change = args.change or "(no change given: pass --args '{\"change\": \"...\"}')"
  local angles = args.angles or { "correctness", "security", "tests" }

  phase("review")
  local reviews = parallel(angles, function(angle)
    local r = agent{ name = "review " .. angle, prompt = "Review for " .. angle .. ":\n" .. change, schema = finding_schema }
    if not r.ok then return { ok = false, error = r.error } end
    return r.output
  end)

  phase("confirm")
  local candidates = {}
  for i, r in ipairs(reviews) do
    if r.ok == false then
      log("review " .. angles[i] .. " failed: " .. r.error, "warn")
    else
      for _, f in ipairs(r.findings) do
        candidates[#candidates + 1] = { angle = angles[i], title = f.title, severity = f.severity }
      end
    end
  end
  local checked = pipeline(candidates, {
    { label = "confirm", handler = function(f)
        local v = agent{ name = "confirm", prompt = "Is this a real problem in the change? " .. f.title .. "\n" .. change }
        if not v.ok then error(v.error, 0) end -- the item fails; the others go on
        f.confirmation = v.output
        return f
      end },
  })
  local confirmed = {}
  for _, item in ipairs(checked.items) do
    if item.ok then confirmed[#confirmed + 1] = item.output end
  end

  phase("summary")
  local s = agent{ name = "summary", prompt = "Summarise " .. #confirmed .. " confirmed findings for the author." }
  report({ findings = json.array(confirmed), summary = s.ok and s.output or ("(no summary: " .. s.error .. ")") })
end
