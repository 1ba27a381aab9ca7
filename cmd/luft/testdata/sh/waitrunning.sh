# waitrunning.sh NAME: waits (up to 60 s) until a run is running and saves its id as NAME.
mkdir -p "$WORK/ids"
i=0
while [ "$i" -lt 1200 ]; do
  id=$(luft --state-dir "$WORK/state" list --status running --limit 1 | awk 'NR == 2 { print $1 }')
  if [ -n "$id" ]; then
    printf '%s' "$id" > "$WORK/ids/$1"
    exit 0
  fi
  sleep 0.05
  i=$((i + 1))
done
echo "no run started" >&2
exit 1
