package rabbit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Ready reports whether the broker at url completes an AMQP handshake, so that
// callers outside this package (a private node's start-up) need not import the
// client library.
func Ready(url string) error {
	c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return c.Close()
}

// RunNames are the queues that Open declares for runID, and its dead-letter
// exchange ("" if opts configure none).
func RunNames(runID string, opts Options) (queues []string, exchange string) {
	base := QueueName(runID)
	queues = []string{base, base + ".delay", base + ".dlq", base + ".held", base + ".live"}
	if v, ok := opts.Args["x-dead-letter-exchange"]; ok {
		s, _ := v.(string)
		if s == "" {
			s = "dlx"
		}
		exchange = base + "." + s
	}
	return queues, exchange
}

// DeleteRun deletes the queues and the exchange of runID (RunNames) that exist
// at url, for `durachk cleanup`, and says what it deleted. AMQP cannot list
// queues: the caller knows the run ids.
func DeleteRun(url, runID string, opts Options) ([]string, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("rabbit: run id %q must match %s", runID, runIDRE)
	}
	c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, errors.New(redactURL(url, err.Error()))
	}
	defer c.Close()
	var deleted []string
	ch, err := c.Channel()
	if err != nil {
		return nil, err
	}
	// A passive declare of a missing queue or exchange closes the channel.
	reopen := func() error {
		ch, err = c.Channel()
		return err
	}
	queues, exchange := RunNames(runID, opts)
	for _, n := range queues {
		if _, err := ch.QueueDeclarePassive(n, false, false, false, false, nil); err != nil {
			if err := reopen(); err != nil {
				return deleted, err
			}
			continue
		}
		msgs, err := ch.QueueDelete(n, false, false, false)
		if err != nil {
			return deleted, fmt.Errorf("rabbit: delete queue %s: %w", n, err)
		}
		deleted = append(deleted, fmt.Sprintf("rabbitmq queue %s (%d messages)", n, msgs))
	}
	if exchange != "" {
		if err := ch.ExchangeDeclarePassive(exchange, "fanout", false, false, false, false, nil); err != nil {
			return deleted, nil
		}
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			return deleted, fmt.Errorf("rabbit: delete exchange %s: %w", exchange, err)
		}
		deleted = append(deleted, "rabbitmq exchange "+exchange)
	}
	return deleted, nil
}

func redactURL(url, s string) string {
	if u, err := amqp.ParseURI(url); err == nil && u.Password != "" {
		s = strings.ReplaceAll(s, u.Password, "xxxxx")
	}
	return s
}
