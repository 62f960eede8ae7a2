package redact

import "testing"

func TestURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"password in user info", "amqp://guest:s3cret@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"no password", "postgres://postgres@127.0.0.1:5432/test", "postgres://postgres@127.0.0.1:5432/test"},
		{"secret query parameter", "sqs://127.0.0.1:9324?region=us-east-1&aws_secret_access_key=AbC&name=q", "sqs://127.0.0.1:9324?region=us-east-1&aws_secret_access_key=xxxxx&name=q"},
		{"password parameter", "postgres://h/db?password=pw1&sslmode=disable", "postgres://h/db?password=xxxxx&sslmode=disable"},
		{"not a URL", "mem", "mem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	got := Command("durachk run --target amqp://u:pw9@h:5672/ --target=postgres://p:pw8@h/db")
	want := "durachk run --target amqp://u:xxxxx@h:5672/ --target=postgres://p:xxxxx@h/db"
	if got != want {
		t.Errorf("Command = %q, want %q", got, want)
	}
}
