from gpuwise.cli.main import run

run()
