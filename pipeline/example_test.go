package pipeline_test

import (
	"errors"
	"fmt"

	"github.com/durachk/durachk/pipeline"
)

func ExampleBuildKey() {
	key, err := pipeline.BuildKey("acme", "invoice-42", 2)
	fmt.Println(key, err)

	_, err = pipeline.BuildKey("Acme", "invoice-42", 2)
	fmt.Println(errors.Is(err, pipeline.ErrInvalidKey))

	_, err = pipeline.BuildKey("acme", "invoice-42", 0)
	fmt.Println(err)
	// Output:
	// acme:invoice-42:v2 <nil>
	// true
	// invalid idempotency key: version 0 < 1
}

func ExampleKeyTenant() {
	for _, key := range []string{"acme:invoice-42:v2", "invoice-42:v2"} {
		tenant, ok := pipeline.KeyTenant(key)
		fmt.Printf("%s: %q %v\n", key, tenant, ok)
	}
	// Output:
	// acme:invoice-42:v2: "acme" true
	// invoice-42:v2: "" false
}
