# luft.sh ARGS...: luft --state-dir $WORK/state ARGS, with each @NAME replaced by the run
# id in $WORK/ids/NAME.
n=$#
while [ "$n" -gt 0 ]; do
  a=$1
  shift
  n=$((n - 1))
  case $a in
  @*) a=$(cat "$WORK/ids/${a#@}") || exit 99 ;;
  esac
  set -- "$@" "$a"
done
exec luft --state-dir "$WORK/state" "$@"
