"""The MapReduce apps and the input data they run on."""
