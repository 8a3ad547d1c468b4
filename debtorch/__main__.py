from debtorch.cli import main

main()
