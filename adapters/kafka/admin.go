package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/durachk/durachk/adapters"
)

// KfakeClusterPrefix starts the cluster id of the private kfake broker
// (internal/kafkaserver), followed by kfake's version: ServerVersion tells
// the emulator from a Kafka by it.
const KfakeClusterPrefix = "durachk-kfake-"

func admin(ctx context.Context, raw, mech string) (*kadm.Client, func(), error) {
	opts, _, err := clientOpts(raw, mech)
	if err != nil {
		return nil, nil, err
	}
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(c), c.Close, nil
}

// ServerVersion names the broker: "kfake <version> (emulator)" for the
// private emulator, else "kafka (cluster <id>, <n> brokers)" (the Kafka
// protocol does not carry the software's version).
func ServerVersion(ctx context.Context, raw, mech string) (string, error) {
	adm, done, err := admin(ctx, raw, mech)
	if err != nil {
		return "", err
	}
	defer done()
	return serverVersion(ctx, adm)
}

func serverVersion(ctx context.Context, adm *kadm.Client) (string, error) {
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("kafka: metadata: %w", classify(err))
	}
	if v, ok := strings.CutPrefix(m.Cluster, KfakeClusterPrefix); ok {
		return "kfake " + v + " (emulator)", nil
	}
	return fmt.Sprintf("kafka (cluster %s, %d brokers)", m.Cluster, len(m.Brokers)), nil
}

// Ready returns nil once the broker answers a metadata request.
func Ready(ctx context.Context, raw, mech string) error {
	_, err := ServerVersion(ctx, raw, mech)
	return err
}

// DeleteRuns deletes the topics and groups of the runs that live does not
// call live, found by listing the broker's topics and groups, and says what
// it removed.
func DeleteRuns(ctx context.Context, raw, mech string, live func(runID string) bool) ([]string, error) {
	adm, done, err := admin(ctx, raw, mech)
	if err != nil {
		return nil, err
	}
	defer done()
	all, err := runIDs(ctx, adm)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, id := range all {
		if !live(id) {
			ids = append(ids, id)
		}
	}
	var removed []string
	var errs []error
	for _, id := range ids {
		r, err := deleteRun(ctx, adm, id)
		removed = append(removed, r...)
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// RunIDs lists the runs that have a topic or group on the broker.
func RunIDs(ctx context.Context, raw, mech string) ([]string, error) {
	adm, done, err := admin(ctx, raw, mech)
	if err != nil {
		return nil, err
	}
	defer done()
	return runIDs(ctx, adm)
}

func runIDs(ctx context.Context, adm *kadm.Client) ([]string, error) {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, classify(err)
	}
	runs := map[string]bool{}
	for _, t := range topics.Names() {
		if id := RunOf(t); id != "" {
			runs[id] = true
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, classify(err)
	}
	for _, g := range groups.Groups() {
		if id := RunOf(g); id != "" {
			runs[id] = true
		}
	}
	ids := make([]string, 0, len(runs))
	for id := range runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// deleteRun deletes the run's topics and group, and says which existed.
func deleteRun(ctx context.Context, adm *kadm.Client, runID string) ([]string, error) {
	topic, dlq, grp := Topics(runID)
	var removed []string
	var errs []error
	resp, err := adm.DeleteTopics(ctx, topic, dlq, acksTopic(runID))
	if err != nil {
		return nil, fmt.Errorf("kafka: delete topics of run %s: %w", runID, classify(err))
	}
	for _, r := range resp.Sorted() {
		switch {
		case r.Err == nil:
			removed = append(removed, "topic "+r.Topic)
		case !errors.Is(r.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("kafka: delete topic %s: %w", r.Topic, r.Err))
		}
	}
	gr, err := adm.DeleteGroups(ctx, grp)
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("kafka: delete group %s: %w", grp, classify(err)))...)
	}
	for _, r := range gr.Sorted() {
		switch {
		case r.Err == nil:
			removed = append(removed, "group "+r.Group)
		case !errors.Is(r.Err, kerr.GroupIDNotFound):
			errs = append(errs, fmt.Errorf("kafka: delete group %s: %w", r.Group, r.Err))
		}
	}
	return removed, errors.Join(errs...)
}

// Leftovers lists the topics and groups of runID still on the broker (for
// tests of the teardown).
func Leftovers(ctx context.Context, raw, mech, runID string) ([]string, error) {
	adm, done, err := admin(ctx, raw, mech)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []string
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range topics.Names() {
		if RunOf(t) == runID {
			out = append(out, "topic "+t)
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	for _, g := range groups.Groups() {
		if RunOf(g) == runID {
			out = append(out, "group "+g)
		}
	}
	return out, nil
}

var _ interface {
	adapters.Queue
	adapters.Extender
	adapters.DeadLetterer
	adapters.Inspector
} = (*Queue)(nil)
