-- deep-research.lua — breadth-first research on a question, with a markdown report.
--
--   luft run --workflow workflows/deep-research.lua \
--     --args '{"question": "How do rate-limit headers differ across LLM providers?", "breadth": 4}' \
--     -o research.md
--
-- args: question (string, required), breadth (2..8 sub-questions, default 4).

meta = {
  reasoning = "Split the question, research the parts in parallel with structured notes, verify, then write.",
  phases = {
    { label = "plan", description = "split the question into sub-questions" },
    { label = "research", description = "one researcher per sub-question", dynamic = true },
    { label = "verify", description = "an adversarial check of the notes" },
    { label = "write", description = "one writer turns the notes into the report" },
  },
}

local question = args.question or "What makes a workflow runtime dependable?"
local breadth = math.max(2, math.min(8, tonumber(args.breadth) or 4))

local plan_schema = {
  type = "object",
  properties = {
    subquestions = { type = "array", items = { type = "string", minLength = 5 }, minItems = breadth, maxItems = breadth },
  },
  required = { "subquestions" },
}

local note_schema = {
  type = "object",
  properties = {
    answer = { type = "string" },
    confidence = { type = "number", minimum = 0, maximum = 1 },
    sources = { type = "array", items = { type = "string" } },
  },
  required = { "answer", "confidence" },
}

function main()
  budget{ agents = 4 * breadth + 10 }

  phase("plan")
  local plan = agent{
    name = "planner",
    prompt = "Split this question into exactly " .. breadth .. " independent sub-questions:\n" .. question,
    schema = plan_schema,
  }
  if not plan.ok then error("planning failed: " .. plan.error) end

  phase("research")
  local notes = parallel(plan.output.subquestions, function(sq, i)
    local r = agent{ name = "researcher " .. i, prompt = "Research: " .. sq, schema = note_schema }
    if not r.ok then return { ok = false, error = r.error } end
    return { question = sq, answer = r.output.answer, confidence = r.output.confidence }
  end)

  local lines = {}
  for i, n in ipairs(notes) do
    if n.ok == false then
      lines[#lines + 1] = ("%d. (research failed: %s)"):format(i, n.error)
    else
      lines[#lines + 1] = ("%d. %s — %s (confidence %.2f)"):format(i, n.question, n.answer, n.confidence)
    end
  end

  phase("verify")
  local check = agent{
    name = "skeptic",
    prompt = "Find claims in these notes that are unsupported or contradict each other:\n" .. table.concat(lines, "\n"),
  }

  phase("write")
  local doc = agent{
    name = "writer",
    prompt = "Write a short report answering: " .. question .. "\nNotes:\n" .. table.concat(lines, "\n")
      .. "\nReviewer remarks:\n" .. (check.ok and check.output or "(none: the check failed)"),
  }
  if not doc.ok then error("writing failed: " .. doc.error) end
  report({ markdown = "# " .. question .. "\n\n" .. doc.output .. "\n\n## Notes\n\n" .. table.concat(lines, "\n") .. "\n" })
end
