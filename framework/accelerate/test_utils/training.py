"""``accelerate.test_utils.training.mocked_dataloaders``: Accelerate's examples import it when their own tests set
``TESTING_MOCKED_DATALOADERS=1``. It reads sample files of Accelerate's repository and a tokenizer from the Hugging
Face hub, which the framework does not ship: it imports, and refuses when called."""

from framework.accelerate.utils.unsupported import refused_function

__all__ = ["mocked_dataloaders"]

mocked_dataloaders = refused_function(
    "mocked_dataloaders", "it reads Accelerate's test sample files and a hub tokenizer, which the framework does not "
    "ship; unset TESTING_MOCKED_DATALOADERS to run the example on its own data")
