package rabbit

import (
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
