from django.urls import path

from webapp.ops import views

urlpatterns = [
    path("", views.home, name="home"),
]
