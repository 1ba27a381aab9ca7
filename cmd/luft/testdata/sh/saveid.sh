# saveid.sh NAME STATUS: saves the id of the newest run in STATUS as $WORK/ids/NAME and its
# first 13 characters as $WORK/ids/NAME.short.
set -e
mkdir -p "$WORK/ids"
id=$(luft --state-dir "$WORK/state" list --status "$2" --limit 1 | awk 'NR == 2 { print $1 }')
if [ -z "$id" ]; then
  echo "no $2 run to save as $1" >&2
  exit 1
fi
printf '%s' "$id" > "$WORK/ids/$1"
printf '%s' "$id" | cut -c1-13 > "$WORK/ids/$1.short"
