-- parallel-demo.lua — fan out over a list, then combine.
--
-- parallel(items, fn) runs fn(item, index) for every item at once, each in its own branch,
-- and returns the values in input order. A branch may call agent() any number of times.
-- A failed agent call returns its result with ok=false (it does not raise), and a branch
-- that raises an error leaves {ok=false, status="error", error=msg} in its slot instead
-- of stopping the run.
--
--   luft run --workflow examples/parallel-demo.lua

meta = {
  reasoning = "Review three areas independently, then merge the findings.",
  phases = {
    { label = "review", description = "one reviewer per area, in parallel" },
    { label = "merge", description = "one agent merges the reviews" },
  },
}

local areas = { "security", "performance", "readability" }

function main()
  phase("review")
  local reviews = parallel(areas, function(area, i)
    local r = agent{
      name = "reviewer " .. area,
      prompt = "Review the project for " .. area .. " problems. List the top three.",
    }
    if not r.ok then
      return { ok = false, area = area, error = r.error }
    end
    return { ok = true, area = area, text = r.output }
  end, { max_concurrency = 3 })

  -- Check every slot: a failed review (or a branch that raised) has ok == false.
  local notes = {}
  for i, rv in ipairs(reviews) do
    if rv.ok == false then
      log("review " .. i .. " failed: " .. rv.error, "warn")
    else
      notes[#notes + 1] = rv.area .. ": " .. rv.text
    end
  end

  phase("merge")
  local merged = agent{
    name = "merger",
    prompt = "Merge these reviews into one prioritised list:\n" .. table.concat(notes, "\n"),
  }
  if not merged.ok then
    error("the merge failed: " .. merged.error)
  end
  report({ markdown = "# Review\n\n" .. merged.output .. "\n" })
end
