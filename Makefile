# The README's commands. `make demo` and `make test` set up .venv on their own.
PYTHON_SYSTEM ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.outofplace-installed

.PHONY: demo test lit pytest bench profile fuzz clean
N ?= 10000

$(STAMP): pyproject.toml setup.py $(wildcard python/outofplace/backends/*.cpp python/outofplace/backends/*.h)
	$(PYTHON_SYSTEM) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch from the local wheel store, before anything can pull CUDA.
	$(BIN)/pip install --quiet torch==2.13.0
	# jaxlib before the package: the custom-kernel handler (setup.py) builds against the
	# XLA FFI headers it ships.
	$(BIN)/pip install --quiet jax==0.10.2 jaxlib==0.10.2
	# No build isolation: the C++ extensions (setup.py) build against this torch.
	$(BIN)/pip install --quiet --no-build-isolation -e '.[test,xla,iree]'
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/kv_cache.py

# Each part says how long it took (the whole, 13.7-18.2 minutes on 2 idle cores: lit 72-98
# s, pytest 12.5-16.7 minutes, in five clean-clone CI runs of 2026-12-07, sessions 68-69,
# on an AMD EPYC, the upper end in its slow phase; 12.2-15.8 minutes on the Intel Xeon
# of sessions 70-71: lit 58-80 s, pytest 11.1-14.5 minutes, seven clean-clone runs, the
# upper end in its slow phase).
test: lit pytest

lit: $(STAMP)
	@start=$$(date +%s); \
	PATH="$(abspath $(BIN)):$$PATH" FILECHECK_OPTS=-enable-var-scope $(BIN)/lit -sv test; \
	status=$$?; echo "lit: $$(( $$(date +%s) - start )) s"; exit $$status

# test/fuzz without OUTOFPLACE_FUZZ_EXAMPLES: its fixed-seed budget (about a minute and a
# half), with optimizer-style programs and views at runtime positions drawn too, and 24
# nn.Modules with state on both paths (test_fuzz_modules.py, about 30 s of it).
pytest: $(STAMP)
	@start=$$(date +%s); \
	OUTOFPLACE_FUZZ_OPTIMIZER=1 OUTOFPLACE_FUZZ_POSITION_VIEWS=1 \
	$(BIN)/python -m pytest -q -n 2 --durations=10 test/pytest test/fuzz; \
	status=$$?; echo "pytest: $$(( $$(date +%s) - start )) s"; exit $$status

bench: $(STAMP)
	$(BIN)/python bench/run.py --output docs/performance.md

profile: $(STAMP)
	$(BIN)/python bench/compile_profile.py --output docs/profile.md

fuzz: $(STAMP)
	OUTOFPLACE_FUZZ_EXAMPLES=$(N) $(BIN)/python -m pytest -q -n 2 test/fuzz

clean:
	rm -rf $(VENV) build *.egg-info test/Output
