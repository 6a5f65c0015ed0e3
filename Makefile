# The README's two commands. Both set everything up on a fresh clone (see bin/suanli).
.PHONY: up test stack-up stack-down
up:          ## run the control plane locally on the embedded stack
	./bin/suanli up $(ARGS)
test:        ## run the whole test suite (starts and stops the embedded stack)
	./bin/suanli test $(ARGS)
stack-up:
	./bin/suanli stack up
stack-down:
	./bin/suanli stack down
