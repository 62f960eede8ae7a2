package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// help is what every visible command's --help adds to its own text: the
// commands a reader can paste (Examples) and what each exit code means for
// this command (main exits with cli.Code of the command's error).
type help struct {
	examples string
	exits    string
}

// exitsRun are the exit codes of the commands that end in verdicts.
const exitsRun = `  0  every verdict a pass or skipped (skips are listed with their reason)
  1  a violation (with --baseline: a verdict that differs from the baseline's)
  2  an unknown verdict: the run could not tell (also an interrupted or partial run)
  3  a configuration or infrastructure error: one line on stderr names the flag, key or URL`

const exitsPlain = `  0  done
  3  a configuration or infrastructure error: one line on stderr names what`

var helps = map[string]help{
	"run": {examples: `  durachk run                                        # the catalogue on the embedded target
  durachk run --target 'redis://127.0.0.1:6379/0?private-instance.appendfsync=everysec' --contract durability.ack
  durachk run -c durachk.yaml --trials 5 --out out  # every target of a config file, 5 seeds each
  durachk run -c durachk.yaml --baseline .ci/baseline.json   # a CI gate`, exits: exitsRun},
	"atlas": {examples: `  durachk atlas -c atlas/profiles.yaml --trials 5 --out atlas-out
  durachk atlas -c atlas/profiles.yaml --profile redis-always --out atlas-out   # one profile again
  durachk atlas --render docs/atlas                  # re-render atlas.md and atlas.html, run nothing`,
		exits: `  0  every profile ran (its verdicts, violations included, are in the atlas)
  2  interrupted: run it again with the same --out to continue
  3  a configuration error, nothing to run (no profile or contract selected: nothing written),
     or a profile that failed to run`},
	"plan": {examples: `  durachk plan --contract durability.ack --seed 3 -o ack.yaml
  durachk run --plan ack.yaml --target 'redis://127.0.0.1:6379/0?private-instance.appendfsync=always'`, exits: exitsPlain},
	"explore": {examples: `  durachk explore --duration 2m
  durachk explore --target 'redis://127.0.0.1:6379/0' --rounds 20 --seed 3 --out explore-out
  durachk explore --shard 1/4 --rounds 400 --out shard1 && durachk merge shard*/result.json --out all`,
		exits: `  0  no round violated a property and none was unknown
  1  a finding: a round raised a wanted property (shrunk unless --no-shrink)
  2  a round could not tell, or the exploration was interrupted
  3  a configuration or infrastructure error`},
	"selftest": {examples: `  durachk selftest
  durachk selftest --contract retry.bounded --seeds 5`,
		exits: `  0  every sabotage caught, on every seed, by the properties it declares
  1  a sabotage not caught (each named with its seed)
  3  a configuration or infrastructure error`},
	"list": {examples: `  durachk list
  durachk list --target 'amqp://guest:guest@127.0.0.1:5672/' --format json`, exits: exitsPlain},
	"report": {examples: `  durachk report out/result.json --format text
  durachk report out/result.json --format html -o out/report.html`, exits: exitsPlain},
	"compare": {examples: `  durachk compare classic/result.json quorum/result.json
  durachk compare a/result.json b/result.json --format md -o matrix.md
  durachk compare a/result.json b/result.json --format json`, exits: exitsPlain},
	"merge": {examples: `  durachk merge shard1/result.json shard2/result.json --out merged
  durachk merge runner-a/ runner-b/ --out gate`, exits: exitsRun},
	"doctor": {examples: `  durachk doctor -c durachk.yaml
  durachk doctor --target 'postgres://postgres@127.0.0.1:5432/test' --format json`,
		exits: `  0  every target reachable
  3  a target or the effect store unreachable (after every target was checked), or a configuration error`},
	"cleanup": {examples: `  durachk cleanup -c durachk.yaml
  durachk cleanup --target 'redis://127.0.0.1:6379/0' --run 1a2b3c4d5e6f`,
		exits: `  0  nothing left, or everything left removed
  3  a cleanup failed (named on stderr), or a configuration error`},
	"replay": {examples: `  durachk replay out/result.json
  durachk replay out/result.json --contract durability.ack --target "$DURACHK_REDIS_URL"`,
		exits: `  0  every result reproduced
  1  a result did not reproduce (each named)
  3  a configuration or infrastructure error`},
	"check": {examples: `  durachk check out/histories/000-mem_lease.redelivery.jsonl --final out/histories/000-mem_lease.redelivery.final.json
  durachk check --result out/result.json --format json`,
		exits: `  0  every property holds (with --result: every verdict judged again is the run's)
  1  a violation (with --result: also a verdict judged again that differs)
  2  a property the history cannot decide
  3  a configuration error`},
	"version": {examples: `  durachk version`, exits: `  0  always`},
}

// document adds each visible command's examples and exit codes to its help.
func document(root *cobra.Command) {
	for _, c := range root.Commands() {
		h, ok := helps[c.Name()]
		if !ok || c.Hidden {
			continue
		}
		c.Example = h.examples
		long := c.Long
		if long == "" {
			long = c.Short
		}
		c.Long = strings.TrimRight(long, "\n") + "\n\nExit codes:\n" + h.exits
	}
	root.Long = root.Short + "\n\nExit codes of every command: 0 pass, 1 violation, 2 unknown, 3 configuration or infrastructure error;\n" +
		"each command's --help says what they mean for it."
}
