"""The report layer: page assembly (`page`) and plotting helpers (`plotting`) every room's report uses."""
